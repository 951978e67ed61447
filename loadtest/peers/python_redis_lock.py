#!/usr/bin/env python3
"""PyPI ``python-redis-lock`` (module ``redis_lock``) under the ``lockctl bench`` contract.

    python python_redis_lock.py --concurrency C --duration-ms D [--locks K] [--redis-url URL]

The library is synchronous, so: C OS threads sharing one ``redis.Redis`` client (its connection
pool hands each thread its own connection) loop for D ms; thread i uses lock ``i % K``; every
acquire+release pair is timed. Prints one JSON line: concurrency, locks, pairs, pairs_per_sec,
p50_us, p99_us, overlaps.

Acquire: ``Lock.acquire(blocking=True)``: a GET (``_held`` check), SET NX EX, and while the lock is
held, a BLPOP on the lock's signal list (timeout = expire), pushed by the holder's release script.
No polling interval to tune: waiters are woken by the release. Release: ``Lock.release()`` (Lua:
compare, DEL, LPUSH signal). Lock expire 5 s, as in lockctl.

Key names: the library always prefixes ``lock:`` and ``lock-signal:``, so the keys in Redis are
``lock:peerbench:python-redis-lock:...`` and ``lock-signal:peerbench:python-redis-lock:...``.
Run it with the venv made by setup.sh (.run/peers-venv/bin/python).
"""

import argparse
import json
import os
import sys
import threading
import time

import redis
import redis_lock

EXPIRE_S = 5
GIVE_UP_AFTER_END_S = 10.0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--duration-ms", type=int, default=5000)
    p.add_argument("--locks", type=int, default=None, help="distinct locks; defaults to the concurrency")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6390")
    return p.parse_args()


def percentile(sorted_values: list[int], p: float) -> int:
    if not sorted_values:
        return 0
    return sorted_values[round((len(sorted_values) - 1) * p)]


def main(args: argparse.Namespace) -> dict:
    concurrency = max(1, args.concurrency)
    locks = max(1, args.locks if args.locks is not None else concurrency)

    # Pool large enough for every thread to hold a connection (a waiter sits in BLPOP on one).
    client = redis.Redis.from_url(args.redis_url, max_connections=concurrency + 4)
    # Connect and load the scripts before the clock starts.
    warm = redis_lock.Lock(client, "peerbench:python-redis-lock:warmup", expire=1)
    warm.acquire(blocking=True)
    warm.release()

    run_id = f"{(time.time_ns() ^ os.getpid()) & 0xFFFFFFFF:08x}"
    guard = threading.Lock()  # protects holders/overlaps (threads, not an event loop)
    holders = [0] * locks  # > 0 on acquire: two threads hold the same lock at once
    contended = locks < concurrency
    overlaps = 0
    results: list[list[int]] = [[] for _ in range(concurrency)]
    errors: list[BaseException] = []

    started = time.perf_counter_ns()
    stop = started + args.duration_ms * 1_000_000

    def worker(i: int) -> None:
        nonlocal overlaps
        index = i % locks
        lock = redis_lock.Lock(client, f"peerbench:python-redis-lock:{run_id}:{index}", expire=EXPIRE_S)
        latencies = results[i]
        try:
            while time.perf_counter_ns() < stop:
                t0 = time.perf_counter_ns()
                if not lock.acquire(blocking=True):
                    raise RuntimeError(f"{index}: acquire returned False")
                with guard:
                    if holders[index] > 0:
                        overlaps += 1
                    holders[index] += 1
                if contended:
                    time.sleep(0)  # give up the GIL while holding, so other threads run meanwhile
                # Leave before releasing: once the key is gone another thread may rightly take it.
                with guard:
                    holders[index] -= 1
                lock.release()
                latencies.append((time.perf_counter_ns() - t0) // 1000)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed_s = (time.perf_counter_ns() - started) / 1e9
    client.close()
    if errors:
        raise errors[0]

    latencies_us = sorted(v for per_thread in results for v in per_thread)
    return {
        "concurrency": concurrency,
        "locks": locks,
        "pairs": len(latencies_us),
        "pairs_per_sec": round(len(latencies_us) / elapsed_s),
        "p50_us": percentile(latencies_us, 0.50),
        "p99_us": percentile(latencies_us, 0.99),
        "overlaps": overlaps,
    }


def watchdog(limit_s: float) -> None:
    def fire() -> None:
        print(f"{sys.argv[0]}: run did not finish in time", file=sys.stderr)
        os._exit(3)

    timer = threading.Timer(limit_s, fire)
    timer.daemon = True
    timer.start()


if __name__ == "__main__":
    arguments = parse_args()
    watchdog(arguments.duration_ms / 1000.0 + GIVE_UP_AFTER_END_S + 5.0)
    try:
        report = main(arguments)
    except Exception as error:  # noqa: BLE001 - one line on stderr, non-zero exit
        print(f"{sys.argv[0]}: {error!r}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(report, separators=(",", ":")))
