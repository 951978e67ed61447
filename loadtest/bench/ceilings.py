"""The physical limits the strategies are compared with, measured in the same run on the same
servers: the HTTP ceiling (k6's arrival model against GET /healthz), `pg_order_tps` (pgbench
doing db-atomic's order through `seckill_commit`, same per-user limit and quantity mix) and the
raw Redis lock-pair rate (redis-benchmark, without and with pipelining)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from . import cpu
from .processes import Instance, SetupError, k6_metric, read_json, rel, run, run_k6
from .cpu import PairCpu
from .settings import K6_HEALTHZ, LoadModel, Preset
from .stores import Pg, Redis

# Compare-and-delete: the release half of a lock pair (same logic as every library's release).
RELEASE_SCRIPT = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
# redis-benchmark -P: the pipelined raw-Redis reference (a multiplexing client pipelines too).
PIPELINE = 16


def http_ceiling(cfg: Preset, instances: list[Instance], run_dir: Path) -> dict:
    """The same k6 arrival model as the cells (rate, duration, VU pool, both instances round-robin)
    against GET /healthz: what HTTP alone reaches on these instances with k6 on the same machine."""
    out = _healthz_run(instances, run_dir / "k6-healthz", cfg.rate, cfg.duration_s, cfg.pre_vus, cfg.max_vus)
    out["what"] = ("k6 constant-arrival-rate, same rate, duration and VU pool as the cells, GET /healthz on both "
                   "instances round-robin; 200 answers / load duration")
    return out


def http_floor_at(rate: int, duration_s: int, pre_vus: int, max_vus: int, instances: list[Instance],
                  run_dir: Path) -> dict:
    """seckill's CPU per GET /healthz at a fixed offered `rate` (k6, the latency points' arrival
    model): the HTTP floor under an order at that load. Below saturation every request wakes a
    worker on its own, with cold caches, so a request costs several times what it does at
    capacity, where the wrk healthz cell measures the floor."""
    before, wall = cpu.process_ticks(), time.monotonic()
    out = _healthz_run(instances, run_dir / f"k6-healthz-{rate}", rate, duration_s, pre_vus, max_vus)
    used, wall = cpu.group_cpu_s(before, cpu.process_ticks()), time.monotonic() - wall
    out["seckill_us_per_request"] = round(used["seckill"] * 1e6 / out["ok"], 1) if out["ok"] else None
    out["seckill_cpu_s"], out["wall_s"] = round(used["seckill"], 3), round(wall, 3)
    out["what"] = ("k6 constant-arrival-rate at the moderate rate, the latency points' VU pool, GET /healthz on both "
                   "instances round-robin; seckill's utime + stime over k6's whole run / 200 answers")
    return out


def _healthz_run(instances: list[Instance], stem: Path, rate: int, duration_s: int, pre_vus: int, max_vus: int) -> dict:
    summary_path, k6_log = stem.with_suffix(".json"), stem.with_suffix(".log")
    env = {"TARGETS": ",".join(i.base for i in instances), "RATE": str(rate), "DURATION": f"{duration_s}s",
           "MAX_VUS": str(max_vus), "PRE_VUS": str(pre_vus), "SUMMARY_PATH": str(summary_path),
           "LOG_UNEXPECTED": "2"}
    rc = run_k6(K6_HEALTHZ, env, k6_log, timeout=duration_s + 90)
    summary = read_json(summary_path)
    if not summary:
        raise SetupError(f"k6 healthz run left no summary (exit {rc}); see {k6_log}")
    h = summary.get("healthz", {})
    dropped = int(h.get("dropped_iterations", 0))
    return {
        "http_ok_per_sec": round(float(h.get("ok_per_sec", 0.0)), 1),
        "ok": int(h.get("ok", 0)),
        "unexpected": int(h.get("unexpected", 0)),
        "dropped_iterations": dropped,
        "rate": rate, "duration_s": duration_s, "max_vus": max_vus,
        "p50_ms": _ms(k6_metric(summary, "healthz_latency", "med", None)),
        "p99_ms": _ms(k6_metric(summary, "healthz_latency", "p(99)", None)),
        "capped_by_offered_rate": dropped == 0,
        "k6_exit": rc, "k6_log": rel(k6_log),
    }


def _ms(v) -> float | None:
    return None if v is None else round(float(v), 2)


def pgbench_script(model: LoadModel) -> str:
    """One db-atomic order as the service commits it: `seckill_commit` with the 'atomic' guard on a
    random one of 20 shards, the sale's per-user limit, the k6 quantity mix, a fresh buyer and key
    per order (as in the throughput cells, whose buyers practically never repeat). `:sku` and
    `:limit` come from `pgbench -D`; with `-M prepared` they travel as bound parameters, like the
    service's prepared statement."""
    weights = model.qty_weights()
    # CASE over a uniform draw in [1, 100]: quantity q with its share of the mix.
    cases, cum = [], 0.0
    for q, w in weights[:-1]:
        cum += w
        cases.append(f"WHEN :r <= {round(cum * 100)} THEN {q}")
    qty = f"CASE {' '.join(cases)} ELSE {weights[-1][0]} END" if cases else str(weights[-1][0])
    return ("\\set shard random(0, 19)\n"
            "\\set r random(1, 100)\n"
            f"\\set qty {qty}\n"
            "SELECT order_id FROM seckill_commit(:sku::text, 'pgb-' || gen_random_uuid()::text, :qty::int, "
            "gen_random_uuid()::text, :limit::int, ARRAY[:shard::int], ARRAY[:qty::int], ARRAY[0], 'atomic', "
            "ARRAY[0]::bigint[]);\n")


def pgbench_ceiling(pg: Pg, model: LoadModel, run_id: str, run_dir: Path, seconds: int, clients: int) -> dict:
    """One order's database work at full speed, through db-atomic's own SQL path (see
    `pgbench_script`). A scratch sale with 20 shards and practically unlimited stock is created
    first and deleted (with all its orders) afterwards."""
    sku, per_shard = f"bench-pg-{run_id}", 100_000_000
    script = run_dir / "pgbench-order.sql"
    script.write_text(pgbench_script(model))
    pg.rows("DELETE FROM sales WHERE sku = %s", (sku,))
    pg.rows("INSERT INTO sales (sku, total, shard_count, per_user_limit, max_per_order, strategy, generation) "
            "VALUES (%s, %s, 20, %s, %s, 'db-atomic', 1)", (sku, per_shard * 20, model.per_user_limit, model.max_per_order))
    pg.rows("INSERT INTO shards (sku, shard, initial, remaining) SELECT %s, g, %s, %s FROM generate_series(0, 19) g",
            (sku, per_shard, per_shard))
    try:
        cmd = ["pgbench", "-n", *pg.conn, "-M", "prepared", "-D", f"sku={sku}", "-D", f"limit={model.per_user_limit}",
               "-c", str(clients), "-j", "2", "-T", str(seconds), "-f", str(script), pg.db]
        proc = run(cmd, timeout=seconds + 60, env=pg.env)
        text = proc.stdout + proc.stderr
        (run_dir / "pgbench.log").write_text(text)
        m = re.search(r"tps = ([\d.]+) \(without initial connection time\)", text)
        if proc.returncode != 0 or not m:
            raise SetupError(f"pgbench failed (exit {proc.returncode}): {text[-800:]}")

        def found(pattern: str, cast=int):
            hit = re.search(pattern, text)
            return cast(hit.group(1)) if hit else None

        return {
            "pg_order_tps": round(float(m.group(1)), 1),
            "latency_avg_ms": found(r"latency average = ([\d.]+) ms", float),
            "transactions": found(r"number of transactions actually processed: (\d+)"),
            "failed_transactions": found(r"number of failed transactions: (\d+)"),
            "orders_written": pg.value("SELECT count(*) FROM orders WHERE sku = %s", (sku,)),
            "clients": clients, "seconds": seconds, "per_user_limit": model.per_user_limit, "qty_mix": model.qty_mix,
            "what": "pgbench -M prepared: SELECT seckill_commit(..., guard 'atomic') as db-atomic commits an order: "
                    "shard UPDATE ... remaining >= qty on a random one of 20 shards + user_purchases upsert under the "
                    "sale's per-user limit + INSERT orders (an order of one shard carries its part: no part row), one "
                    "transaction; fresh buyer per order",
        }
    finally:
        pg.rows("DELETE FROM sales WHERE sku = %s", (sku,), timeout=120)


def redis_benchmark(redis: Redis, args: list[str], clients: int, n: int, pipeline: int = 1) -> dict:
    cmd = ["redis-benchmark", "-h", redis.host, "-p", redis.port, "--dbnum", redis.db, "-c", str(clients),
           "-n", str(n), "-r", "1000000", "--csv", *(["-P", str(pipeline)] if pipeline > 1 else []), *args]
    proc = run(cmd, timeout=120, env=redis.env)
    rows = [line for line in proc.stdout.splitlines() if line.startswith('"') and not line.startswith('"test"')]
    if proc.returncode != 0 or not rows:
        raise SetupError(f"redis-benchmark failed (exit {proc.returncode}): {(proc.stdout + proc.stderr)[-500:]}")
    f = [x.strip('"') for x in rows[-1].split('","')]
    return {"rps": float(f[1]), "p50_ms": float(f[4]), "p99_ms": float(f[6])}


def redis_pairs(redis: Redis, run_id: str, clients: int, n: int, pipeline: int = 1, pids: list[int] | None = None) -> dict:
    """Acquire (SET NX PX) and release (EVALSHA compare-and-delete) rates at `clients` connections,
    each with `pipeline` requests in flight (redis-benchmark -P; 1: no pipelining).

    Each half runs alone; pairs_per_sec = 1 / (1/set_rps + 1/evalsha_rps), the harmonic
    combination: what the same connections would do if each did one acquire then one release.
    With `pids` (the server's), also the Redis CPU time of each half per request; their sum is the
    Redis CPU of one pair.
    """
    sha = redis.cli("SCRIPT", "LOAD", RELEASE_SCRIPT)
    key = f"benchlock:{run_id}:__rand_int__"
    with PairCpu(pids) as cpu_a:
        acquire = redis_benchmark(redis, ["SET", key, "tok", "NX", "PX", "30000"], clients, n, pipeline)
    with PairCpu(pids) as cpu_r:
        release = redis_benchmark(redis, ["EVALSHA", sha, "1", key, "tok"], clients, n, pipeline)
    pairs = 1.0 / (1.0 / acquire["rps"] + 1.0 / release["rps"])
    out = {"concurrency": clients, "pipeline": pipeline, "requests_each": n, "set_nx_px": acquire,
           "evalsha_release": release, "pairs_per_sec": round(pairs, 1), "redis_cpu_us_per_pair": None}
    if cpu_a.cpu_us is not None and cpu_r.cpu_us is not None:
        acquire["redis_cpu_us_per_op"] = round(cpu_a.cpu_us / n, 2)
        release["redis_cpu_us_per_op"] = round(cpu_r.cpu_us / n, 2)
        out["redis_cpu_us_per_pair"] = round((cpu_a.cpu_us + cpu_r.cpu_us) / n, 2)
    return out


# One SCAN step that also UNLINKs what it found (redis-cli 7.0's --scan has no COUNT: stepping
# through a million keys ten at a time would take minutes). Each step blocks Redis for one
# COUNT's worth of keys only.
SCAN_UNLINK_SCRIPT = ("local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3]) "
                      "for _, k in ipairs(r[2]) do redis.call('UNLINK', k) end return {r[1], #r[2]}")


def unlink_pattern(redis: Redis, pattern: str, count: int = 20000, timeout: float = 120) -> int:
    """UNLINKs every key matching `pattern`; returns how many. The raw-Redis reference leaves up
    to a million keys with a 30 s TTL behind: deleted now, their expiry does not land in the
    Redis CPU time (and throughput) of the lock runs that follow."""
    deadline = time.monotonic() + timeout
    cursor, total = "0", 0
    while True:
        out = redis.cli("EVAL", SCAN_UNLINK_SCRIPT, "0", cursor, pattern, str(count)).split()
        if len(out) != 2 or not out[1].isdigit():
            raise SetupError(f"SCAN/UNLINK step: unexpected reply {out!r}")
        cursor, total = out[0], total + int(out[1])
        if cursor == "0":
            return total
        if time.monotonic() > deadline:
            raise SetupError(f"SCAN/UNLINK of {pattern} took more than {timeout:.0f}s")
