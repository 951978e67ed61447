#!/usr/bin/env python3
"""redis-py's asyncio ``Lock`` under the ``lockctl bench`` contract.

    python redis_py_lock.py --concurrency C --duration-ms D [--locks K] [--redis-url URL] [--sleep-ms S]

C asyncio tasks (one event loop, one thread) loop for D ms; task i uses lock ``i % K``; every
acquire+release pair is timed. Prints one JSON line: concurrency, locks, pairs, pairs_per_sec,
p50_us, p99_us, overlaps.

Acquire: ``Lock.acquire()`` with ``blocking=True`` and no ``blocking_timeout``: SET NX PX, and while
the lock is held by someone else, ``asyncio.sleep(sleep)`` then try again. ``sleep`` is the
library's polling interval (default 0.1 s). This harness uses 5 ms: about the mean pause of the
rslock (uniform 0..9 ms) and node-redlock (5 +/- 5 ms) harnesses, so the three polling libraries
poll at the same rate; 100 ms would make the contended number mostly measure the sleep.
Release: ``Lock.release()`` (a Lua compare-and-delete). Lock TTL 5 s, as in lockctl.
Run it with the venv made by setup.sh (.run/peers-venv/bin/python).
"""

import argparse
import asyncio
import json
import os
import sys
import threading
import time

import redis.asyncio as aioredis
from redis.asyncio.lock import Lock

TTL_S = 5.0
GIVE_UP_AFTER_END_S = 10.0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--duration-ms", type=int, default=5000)
    p.add_argument("--locks", type=int, default=None, help="distinct locks; defaults to the concurrency")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6390")
    p.add_argument("--sleep-ms", type=float, default=5.0, help="redis-py Lock(sleep=...) polling interval")
    return p.parse_args()


def percentile(sorted_values: list[int], p: float) -> int:
    if not sorted_values:
        return 0
    return sorted_values[round((len(sorted_values) - 1) * p)]


async def main() -> dict:
    args = parse_args()
    concurrency = max(1, args.concurrency)
    locks = max(1, args.locks if args.locks is not None else concurrency)
    sleep_s = args.sleep_ms / 1000.0

    client = aioredis.Redis.from_url(args.redis_url)
    # Connect and load the release script before the clock starts.
    warm = Lock(client, "peerbench:redis-py:warmup", timeout=1.0)
    await warm.acquire()
    await warm.release()

    run_id = f"{(time.time_ns() ^ os.getpid()) & 0xFFFFFFFF:08x}"
    holders = [0] * locks  # > 0 on acquire: two tasks hold the same lock at once
    contended = locks < concurrency
    overlaps = 0
    latencies_us: list[int] = []

    started = time.perf_counter_ns()
    stop = started + args.duration_ms * 1_000_000

    async def worker(i: int) -> None:
        nonlocal overlaps
        index = i % locks
        lock = Lock(client, f"peerbench:redis-py:{run_id}:{index}", timeout=TTL_S, sleep=sleep_s, blocking=True)
        while time.perf_counter_ns() < stop:
            t0 = time.perf_counter_ns()
            if not await lock.acquire():
                raise RuntimeError(f"{lock.name}: acquire returned False")
            if holders[index] > 0:
                overlaps += 1
            holders[index] += 1
            if contended:
                # Let the other tasks run while this one holds the lock, or the check could never
                # see an overlap on a single-threaded event loop.
                await asyncio.sleep(0)
            # Leave before releasing: once the key is gone another task may rightly take it.
            holders[index] -= 1
            await lock.release()
            latencies_us.append((time.perf_counter_ns() - t0) // 1000)

    try:
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    finally:
        await client.aclose()
    elapsed_s = (time.perf_counter_ns() - started) / 1e9

    latencies_us.sort()
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
    duration_s = parse_args().duration_ms / 1000.0
    watchdog(duration_s + GIVE_UP_AFTER_END_S + 5.0)
    try:
        report = asyncio.run(main())
    except Exception as error:  # noqa: BLE001 - one line on stderr, non-zero exit
        print(f"{sys.argv[0]}: {error!r}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(report, separators=(",", ":")))
