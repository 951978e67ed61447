"""The runner's command line and the order of a run: instances up, HTTP ceiling, mission cells,
throughput cells, latency points, the lifecycle cell (smoke), the wrk cells (capacity, retry storm, hot users, HTTP floor),
instances down, pgbench and redis-benchmark ceilings, the lock section, then the result files and
a console summary. Each step lives in its own module; this one only sequences them and turns
failures into the exit status (0 correct, 1 a correctness violation, 2 the run could not be
carried out)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import secrets
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import ceilings, cpu, disk, locks, memory
from .capacity import WrkSpec, capacity_specs, run_capacity
from .cells import CellContext, CellResult, CellSpec, run_cell
from .latency import latency_vus, plan_points, point_flag
from .machine import git_info, machine_info
from .processes import Instance, SetupError, k6_environment, log, log_findings, rel
from .publish import print_summary, write_results
from .quiet import ready
from .result import RunResult
from .settings import (BENCH_PAYMENT_WINDOW_MS, CAPACITY_CONNECTIONS, CAPACITY_STOCK, HOT_USERS, INSTANCES,
                       LATENCY_DURATION_S, LATENCY_FRACTIONS, LOCKCTL_BIN, MAIN_CELLS, MODERATE_RATE, TARGET_ROUNDS,
                       PRESETS, REQUEST_DEADLINE_MS, RESULTS, RUN_BASE, SECKILL_BIN, SHARDS, SMOKE_STRATEGIES,
                       STRATEGIES, THROUGHPUT_USERS, WRK_CONNECTIONS, WRK_THREADS, WRK_TIMEOUT_S, LoadModel, Preset,
                       instance_workers, pre_vus)
from .stores import Pg, Redis, loopback_only, redis_server_pid
from .targets import capacity_targets, evaluate_targets, memory_targets
from .unpaid import UNITS, UnpaidSpec, run_unpaid


def parse_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="loadtest/bench", description="seckill comparison runner (make bench); see docs/bench.md")
    p.add_argument("--smoke", action="store_true", help="short CI run: correctness only, writes loadtest/results/smoke-latest.json")
    p.add_argument("--strategies", default=None, help="comma-separated subset (default: all; smoke: all but owned-unfenced)")
    p.add_argument("--throughput", default=None, help="throughput cells as strategy/shards, comma-separated, '' for none "
                                                      f"(default: {MAIN_CELLS}; smoke: none)")
    p.add_argument("--latency", default=None, help="latency points of these strategy/shards (each needs its throughput "
                                                   f"cell), '' for none (default: {MAIN_CELLS}; smoke: none)")
    p.add_argument("--latency-duration", type=int, default=LATENCY_DURATION_S, help="seconds per latency point (default 10)")
    p.add_argument("--target-rounds", type=int, default=TARGET_ROUNDS,
                   help=f"runs of owned-shards' two target points ({MODERATE_RATE} arrivals/s and half its throughput "
                        f"cell); each target takes its point's median round (default {TARGET_ROUNDS})")
    p.add_argument("--shards", default=",".join(map(str, SHARDS)), help="comma-separated shard counts (default: 1,20)")
    p.add_argument("--total", type=int, help="stock per cell (full 10000, smoke 300)")
    p.add_argument("--rate", type=int, help="k6 arrivals/s (full 4000, smoke 1000)")
    p.add_argument("--duration", type=int, dest="duration_s", help="k6 load seconds per cell (full 20, smoke 3)")
    p.add_argument("--max-vus", type=int, help="k6 VU ceiling (full 300, smoke 100)")
    p.add_argument("--pg-seconds", type=int, help="pgbench duration (full 10, smoke 2)")
    p.add_argument("--lock-ms", type=int, help="lockctl / peer run length in ms (full 3000, smoke 500)")
    p.add_argument("--no-peers", action="store_true", help="skip the peer lock libraries")
    p.add_argument("--no-ceilings", action="store_true", help="strategy matrix only: skip pgbench, redis-benchmark, lockkit and peers")
    p.add_argument("--no-capacity", action="store_true", help="skip the wrk cells (capacity, retry storm, hot users, HTTP floor)")
    p.add_argument("--only-capacity", action="store_true",
                   help="the two instances and the wrk cells only (no k6 cell, ceiling or lock section); writes "
                        "loadtest/results/capacity-latest.{json,md} (smoke: the short storm cell, smoke-latest.json)")
    p.add_argument("--capacity-duration", type=int, help="seconds of wrk load per wrk cell (full 8, smoke 2)")
    p.add_argument("--only-locks", action="store_true",
                   help="lockkit section only: the raw Redis pair references, lockctl on every backend and the peers "
                        "(no seckill instances, no strategy matrix, no HTTP/pgbench ceilings)")
    p.add_argument("--redlock-url", default=os.environ.get(locks.REDLOCK_URL_ENV, ""),
                   help=f"Redlock backend, redlock://h:p,... (default ${locks.REDLOCK_URL_ENV}; '' skips it)")
    p.add_argument("--sentinel-url", default=os.environ.get(locks.SENTINEL_URL_ENV, ""),
                   help=f"Redis Sentinel backend, redis+sentinel://h:p,.../name (default ${locks.SENTINEL_URL_ENV}; "
                        "'' skips it)")
    p.add_argument("--cluster-url", default=os.environ.get(locks.CLUSTER_URL_ENV, ""),
                   help=f"Redis Cluster backend, redis+cluster://h:p,... (default ${locks.CLUSTER_URL_ENV}; '' skips it)")
    p.add_argument("--start-lock-servers", default=None, metavar="WITH",
                   help="start lockkit's extra servers (scripts/lock-servers.sh, and the services named in WITH, "
                        "e.g. zookeeper,etcd) in the lock section, after the head to head with the peer, so that "
                        "they idle neither beside the seckill cells nor beside the head to head (scripts/bench.sh "
                        "passes it)")
    p.add_argument("--results-dir", type=Path, default=RESULTS, help="where result files go (default loadtest/results)")
    p.add_argument("--keep-sales", action="store_true", help="keep the bench sales (orders) in PostgreSQL afterwards")
    return p.parse_args(argv)


def parse_cells(text: str, what: str) -> list[tuple[str, int]]:
    """"a/20,b/1" -> [("a", 20), ("b", 1)]; SetupError on a malformed item or an unknown strategy."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, _, sh = item.partition("/")
        if not sh.isdigit() or int(sh) < 1:
            raise SetupError(f"{what}: {item!r} is not strategy/shards")
        if name not in STRATEGIES:
            raise SetupError(f"{what}: unknown strategy {name!r}")
        out.append((name, int(sh)))
    return out


@dataclass
class Plan:
    """What this run does, decided from the arguments before anything starts."""

    mode: str
    cfg: Preset
    tp_cfg: Preset
    model: LoadModel
    strategies: list[str]
    shard_list: list[int]
    throughput: list[tuple[str, int]]
    latency: list[tuple[str, int]]
    redis_url: str
    database_url: str
    backends: list[locks.LockBackend]
    capacity: list[WrkSpec]
    lifecycle: UnpaidSpec | None  # smoke only: the sale where a share of buyers never pay

    def cells(self) -> list[CellSpec]:
        def spec(strategy: str, shards: int, kind: str, c: Preset) -> CellSpec:
            return CellSpec(strategy=strategy, shards=shards, kind=kind, total=c.total, users=c.users, rate=c.rate,
                            duration_s=c.duration_s, vus_limit=c.max_vus, pre_vus=pre_vus(c.rate, c.max_vus))
        return ([spec(s, sh, "mission", self.cfg) for s in self.strategies for sh in self.shard_list]
                + [spec(s, sh, "throughput", self.tp_cfg) for s, sh in self.throughput])


def make_plan(args: argparse.Namespace) -> Plan:
    mode = "smoke" if args.smoke else "full"
    cfg = PRESETS[mode].with_overrides(total=args.total, rate=args.rate, duration_s=args.duration_s, max_vus=args.max_vus,
                                       pg_seconds=args.pg_seconds, lock_ms=args.lock_ms, capacity_s=args.capacity_duration)
    if args.no_peers:
        cfg = cfg.with_overrides(peers=False)
    if args.only_locks and args.no_ceilings:
        raise SetupError("--only-locks and --no-ceilings exclude each other")
    if args.only_capacity and (args.no_capacity or args.only_locks):
        raise SetupError("--only-capacity excludes --no-capacity and --only-locks")
    strategies = [s.strip() for s in (args.strategies or ",".join(SMOKE_STRATEGIES if args.smoke else STRATEGIES)).split(",") if s.strip()]
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise SetupError(f"unknown strategies: {unknown}")
    default_main = "" if args.smoke else MAIN_CELLS
    throughput = parse_cells(default_main if args.throughput is None else args.throughput, "--throughput")
    latency = parse_cells(default_main if args.latency is None else args.latency, "--latency")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6390")
    database_url = os.environ.get("DATABASE_URL", "postgres://seckill@127.0.0.1:5440/seckill")
    loopback_only(redis_url, "REDIS_URL")
    loopback_only(database_url, "DATABASE_URL")
    backends = ([] if args.no_ceilings or args.only_capacity
                else locks.plan_backends(os.environ, redis_url, args.redlock_url, args.cluster_url,
                                         args.sentinel_url))
    needed = (LOCKCTL_BIN,) if args.only_locks else (SECKILL_BIN,) if args.only_capacity else (SECKILL_BIN, LOCKCTL_BIN)
    for binary in needed:
        if not os.access(binary, os.X_OK):
            raise SetupError(f"{binary} missing: run scripts/bench.sh (it builds the binaries)")
    capacity = [] if args.no_capacity or args.only_locks else capacity_specs(mode, cfg.capacity_s)
    for tool in ("pgbench", "redis-cli", "redis-benchmark") + (("wrk",) if capacity else ()):
        if not shutil.which(tool):
            raise SetupError(f"{tool} not found on PATH (scripts/bench.sh installs it)")
    # Throughput cells: no arrival buys more than 2 units, so this stock cannot run out during the
    # load (and lasts well over 15 s at the offered rate).
    tp_cfg = cfg.with_overrides(total=cfg.rate * cfg.duration_s * 2, users=THROUGHPUT_USERS)
    lifecycle = UnpaidSpec() if args.smoke and not (args.only_capacity or args.only_locks) else None
    return Plan(mode, cfg, tp_cfg, LoadModel.read(), strategies, [int(x) for x in args.shards.split(",") if x.strip()],
                throughput, latency, redis_url, database_url, backends, capacity, lifecycle)


def settings_of(plan: Plan, args: argparse.Namespace) -> dict:
    cfg = plan.cfg
    k6_env = k6_environment({})
    return {"total": cfg.total, "rate": cfg.rate, "duration_s": cfg.duration_s, "max_vus": cfg.max_vus, "users": cfg.users,
            "pg_seconds": cfg.pg_seconds, "pg_clients": cfg.pg_clients, "lock_ms": cfg.lock_ms, "peers": cfg.peers,
            "redis_requests": cfg.redis_n, "redis_requests_pipelined": cfg.redis_n_pipelined,
            "strategies": plan.strategies, "shards": plan.shard_list,
            "per_user_limit": plan.model.per_user_limit, "max_per_order": plan.model.max_per_order,
            "qty_mix": plan.model.qty_mix, "replay_fraction": plan.model.replay_fraction,
            "invalid_fraction": plan.model.invalid_fraction, "load_model_from": "loadtest/k6/lib/seckill.js defaults",
            "instances": INSTANCES, "workers_per_instance": instance_workers(),
            "request_deadline_ms": REQUEST_DEADLINE_MS, "k6_gogc": k6_env["GOGC"], "k6_gomemlimit": k6_env["GOMEMLIMIT"],
            "throughput_cells": [f"{n}/{sh}" for n, sh in plan.throughput],
            "throughput_total": plan.tp_cfg.total, "throughput_users": plan.tp_cfg.users,
            "latency_cells": [f"{n}/{sh}" for n, sh in plan.latency], "latency_fractions": list(LATENCY_FRACTIONS),
            "latency_duration_s": args.latency_duration, "target_rounds": args.target_rounds,
            "only_locks": args.only_locks,
            "pipeline": ceilings.PIPELINE, "lock_backends": [be.name for be in plan.backends],
            "only_capacity": args.only_capacity, "capacity_cells": [c.label for c in plan.capacity],
            "lifecycle": None if plan.lifecycle is None else asdict(plan.lifecycle),
            "owned_payment_window_ms": BENCH_PAYMENT_WINDOW_MS,
            "capacity": {"duration_s": cfg.capacity_s, "connections_per_instance": WRK_CONNECTIONS,
                         "capacity_connections_per_instance": list(CAPACITY_CONNECTIONS),
                         "threads_per_wrk": WRK_THREADS, "wrk_timeout_s": WRK_TIMEOUT_S, "total": CAPACITY_STOCK,
                         "users": THROUGHPUT_USERS, "hot_users": HOT_USERS}}


def start_instances(plan: Plan, run_dir: Path, token: str) -> list[Instance]:
    env = {**os.environ, "SECKILL_WORKERS": str(instance_workers())}
    env.update({"REDIS_URL": plan.redis_url, "DATABASE_URL": plan.database_url,
                "SECKILL_ADMIN_TOKEN": token, "NO_COLOR": "1", "RUST_LOG": os.environ.get("BENCH_RUST_LOG", "info")})
    instances: list[Instance] = []
    for i in range(1, INSTANCES + 1):
        instances.append(Instance(str(i), run_dir, env))
        instances[-1].wait_ready()  # one at a time: they serialise on the migration lock anyway
    return instances


def describe(cell: CellResult) -> str:
    text = (f"    {cell.orders_per_sec:.0f} orders/s, p50 {cell.p50_ms} ms, p99 {cell.p99_ms} ms, sold {cell.sold}, "
            f"oversold {cell.oversold}, stranded {cell.stranded}, acked {cell.acked} (missing {cell.acked_missing}), "
            f"busy {cell.busy}, errors {cell.errors}, dropped {cell.dropped_iterations}, "
            f"Redis cmds/order {cell.redis_cmds_per_order}, PG commits/order {cell.pg_commits_per_order}, k6 exit {cell.k6_exit}")
    return text + (f"  VIOLATION: {'; '.join(cell.violations)}" if cell.violations else "")


def run_one(ctx: CellContext, spec: CellSpec, n: int, of: int, res: RunResult) -> CellResult:
    log(f"[{n}/{of}] {spec.label}: {spec.total} units, {spec.rate}/s for {spec.duration_s} s, max {spec.vus_limit} VUs")
    cell = run_cell(ctx, spec)
    log(describe(cell))
    res.violations.extend(cell.violations)
    instances_alive(ctx)
    return cell


def instances_alive(ctx: CellContext) -> None:
    for inst in ctx.instances:
        if not inst.process.alive():
            raise SetupError(f"seckill #{inst.name} died (exit {inst.process.proc.returncode}); see {inst.log_path}")


def run_wrk_cells(plan: Plan, ctx: CellContext, res: RunResult) -> None:
    """The wrk cells (capacity.py), after the k6 ones: their load is far heavier."""
    res.capacity = run_capacity(ctx, plan.capacity, plan.model)
    for c in res.capacity:
        res.violations.extend(c.violations)
    instances_alive(ctx)


def run_lifecycle(spec: UnpaidSpec, ctx: CellContext, res: RunResult) -> None:
    """The sale where a share of buyers never pay (unpaid.py), after the k6 cells."""
    log(f"lifecycle: {spec.total} units, {spec.rate}/s for {spec.duration_s} s, {round(spec.pay_share * 100)}% pay, "
        f"window {spec.window_ms} ms")
    res.lifecycle = lc = run_unpaid(ctx, spec)
    a = lc.audit or {}
    pages = ", ".join(f"#{n} " + ("none" if s is None else "/".join(str(s.get(k)) for k in UNITS)) for n, s in lc.live.items())
    log(f"    audit paid {a.get('paid')}/{a.get('total')}, returned {a.get('returned')}; live reserved/paid/returned {pages}; "
        f"k6 exit {lc.k6_exit} in {lc.k6_wall_s} s" + (f"  VIOLATION: {'; '.join(lc.violations)}" if lc.violations else ""))
    res.violations.extend(lc.violations)
    instances_alive(ctx)


def run_matrix(plan: Plan, args: argparse.Namespace, ctx: CellContext, res: RunResult) -> None:
    """HTTP ceiling, mission and throughput cells, then the latency points of the main strategies."""
    cfg = plan.cfg
    if not args.no_ceilings:
        log(f"HTTP ceiling: GET /healthz, {cfg.rate}/s for {cfg.duration_s} s")
        try:
            res.ceilings["http"] = hc = ceilings.http_ceiling(cfg, ctx.instances, ctx.run_dir)
            log(f"    {hc['http_ok_per_sec']:.0f} req/s, dropped {hc['dropped_iterations']}, non-200 {hc['unexpected']}")
        except SetupError as e:  # a ceiling that could not be measured is reported, not fatal
            log(f"HTTP ceiling not measured: {e}")
            res.ceilings["http"] = {"error": str(e)}
    specs = plan.cells()
    for n, spec in enumerate(specs, 1):
        res.strategies.append(run_one(ctx, spec, n, len(specs), res))
    tp = {(c.strategy, c.shards): c for c in res.strategies if c.kind == "throughput"}
    points = plan_points(tp, plan.latency, LATENCY_FRACTIONS, args.latency_duration, args.target_rounds)
    for key in plan.latency:
        if key not in tp:
            log(f"latency points of {key[0]}/{key[1]}: not run (no throughput cell of it in this run)")
    for n, spec in enumerate(points, 1):
        ready(ctx.pg, "the point")
        cell = run_one(ctx, spec, n, len(points), res)
        cell.not_valid = point_flag(cell)
        if cell.not_valid:
            log(f"    latency point NOT VALID: {cell.not_valid}")
        res.latency.append(cell)
    if any(s.rate == MODERATE_RATE and s.strategy == "owned-shards" for s in points):
        moderate_http_floor(ctx, args.latency_duration, res)
    if points:
        disk_flush_floor(ctx, args.latency_duration, res)


def moderate_http_floor(ctx: CellContext, duration_s: int, res: RunResult) -> None:
    """The HTTP floor under the moderate point: seckill's CPU per GET /healthz offered at the same
    rate, for the same time, with the same VU pool."""
    ready(ctx.pg, "the HTTP floor at the moderate rate")
    pre, most = latency_vus(MODERATE_RATE)
    log(f"HTTP floor at the moderate rate: GET /healthz, {MODERATE_RATE}/s for {duration_s} s")
    try:
        res.ceilings["http_moderate"] = floor = ceilings.http_floor_at(MODERATE_RATE, duration_s, pre, most,
                                                                        ctx.instances, ctx.run_dir)
        log(f"    seckill {floor['seckill_us_per_request']} µs per request, {floor['ok']} answered, "
            f"dropped {floor['dropped_iterations']}")
    except SetupError as e:
        log(f"HTTP floor at the moderate rate not measured: {e}")
        res.ceilings["http_moderate"] = {"error": str(e)}


def disk_flush_floor(ctx: CellContext, duration_s: int, res: RunResult) -> None:
    """The disk's flush floor beside the latency points, for as long as one point, with the
    servers idle (see `disk`)."""
    ready(ctx.pg, "the disk's flush floor")
    log(f"disk flush floor: write + fdatasync of {disk.WRITE_BYTES} bytes for {duration_s} s")
    res.ceilings["disk_flush"] = floor = disk.flush_floor(ctx.run_dir, duration_s)
    log(f"    {disk.describe(floor)}")


def check_backends(backends: list[locks.LockBackend]) -> None:
    """Checks that each backend answers; a failure is recorded in the backend (its entry reports it,
    and it counts as a violation)."""
    for be in backends:
        try:
            be.check()
        except SetupError as e:
            be.error = str(e)
            log(f"ERROR: {e}")


def run_ceilings_and_locks(plan: Plan, args: argparse.Namespace, pg: Pg, redis: Redis, res: RunResult, run_dir: Path) -> None:
    cfg = plan.cfg
    if not args.only_locks:
        log(f"pgbench ceiling: {cfg.pg_clients} clients, {cfg.pg_seconds} s")
        res.ceilings["pg"] = ceilings.pgbench_ceiling(pg, plan.model, res.run_id, run_dir, cfg.pg_seconds, cfg.pg_clients)
        res.ceilings["pg_order_tps"] = res.ceilings["pg"]["pg_order_tps"]
        log(f"    pg_order_tps {res.ceilings['pg_order_tps']}")
    one_redis, others = plan.backends[0], plan.backends[1:]
    check_backends([one_redis])
    if one_redis.error:
        raise SetupError(one_redis.error)
    pids = one_redis.pids
    redis_by_c, piped_by_c = {}, {}
    for c in ((50,) if not args.only_locks else ()) + tuple(locks.LOCK_CONCURRENCIES):
        log(f"redis-benchmark pairs at C={c} ({cfg.redis_n[c]} requests each)")
        redis_by_c[c] = ceilings.redis_pairs(redis, res.run_id, c, cfg.redis_n[c], pids=pids)
        log(f"    {redis_by_c[c]['pairs_per_sec']:.0f} pairs/s, Redis CPU {redis_by_c[c]['redis_cpu_us_per_pair']} us/pair")
    for c in locks.LOCK_CONCURRENCIES:
        n = cfg.redis_n_pipelined[c]
        log(f"redis-benchmark pairs at C={c}, pipelined -P {ceilings.PIPELINE} ({n} requests each)")
        piped_by_c[c] = ceilings.redis_pairs(redis, res.run_id, c, n, ceilings.PIPELINE, pids)
        log(f"    {piped_by_c[c]['pairs_per_sec']:.0f} pairs/s, Redis CPU {piped_by_c[c]['redis_cpu_us_per_pair']} us/pair")
    # Their keys (30 s TTL) would otherwise expire inside the lock runs that follow.
    log(f"    unlinked the {ceilings.unlink_pattern(redis, f'benchlock:{res.run_id}:*')} keys the redis-benchmark runs left")
    res.ceilings["redis"] = {str(c): v for c, v in redis_by_c.items()}
    res.ceilings["redis_pipelined"] = {str(c): v for c, v in piped_by_c.items()}
    if 50 in redis_by_c:
        res.ceilings["redis_pairs_per_sec"] = redis_by_c[50]["pairs_per_sec"]
    if (res.ceilings.get("http") or {}).get("http_ok_per_sec") is not None:
        res.ceilings["http_ok_per_sec"] = res.ceilings["http"]["http_ok_per_sec"]
    # On a box without the other lock servers (see locks.quiet_head_to_head).
    versus = locks.quiet_head_to_head(cfg.lock_ms, cfg.peers, one_redis)
    if args.start_lock_servers is not None:
        locks.start_servers(args.start_lock_servers)
    check_backends(others)
    res.lockkit = locks.lockkit_section(cfg.lock_ms, cfg.peers, {c: redis_by_c[c] for c in locks.LOCK_CONCURRENCIES},
                                        plan.backends, piped_by_c, ceilings.PIPELINE, versus)
    res.violations.extend(locks.lock_violations(res.lockkit))
    for be in res.lockkit["backends"].values():
        if be.get("peers_exit"):
            log(f"peer harnesses on {be['label']}: run.sh exited {be['peers_exit']} (failed runs are marked 'error')")


def delete_sales(pg: Pg, redis: Redis, run_id: str) -> None:
    """The run's sales (orders cascade) and the service's Redis keys of them."""
    try:
        pg.rows("DELETE FROM sales WHERE sku LIKE %s", (f"bench-{run_id}-%",), timeout=300)
        keys = [k for k in redis.cli("--scan", "--pattern", f"*bench-{run_id}-*", timeout=60).splitlines() if k]
        for i in range(0, len(keys), 200):
            redis.cli("UNLINK", *keys[i:i + 200])
    except SetupError as e:
        log(f"could not delete the bench sales: {e}")


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        plan = make_plan(args)
    except (SetupError, ValueError, OSError) as e:
        log(f"ERROR: {e}")
        return 2
    started = dt.datetime.now(dt.timezone.utc)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    run_id = f"{started.strftime('%H%M%S')}{secrets.token_hex(2)}"
    run_dir = RUN_BASE / f"{stamp}-{plan.mode}"
    run_dir.mkdir(parents=True, exist_ok=True)
    results = args.results_dir.resolve()
    results.mkdir(parents=True, exist_ok=True)
    pg, redis = Pg(plan.database_url), Redis(plan.redis_url)

    # SIGTERM/SIGINT -> exception, so `finally` stops the instances.
    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    t_start = time.monotonic()
    try:
        res = RunResult(mode=plan.mode, started_at=started.isoformat(timespec="seconds"), run_id=run_id, git=git_info(),
                        machine=machine_info(pg, redis), settings=settings_of(plan, args), files={"run_dir": rel(run_dir)},
                        lockkit=locks.empty_section(plan.cfg.lock_ms))
    except SetupError as e:
        log(f"ERROR: {e}")
        return 2
    log(f"mode {plan.mode}, run {run_id}, working files in {rel(run_dir)}")
    service_redis = redis_server_pid(redis)
    if service_redis:
        cpu.pin("redis", [service_redis])
    else:
        log("the service's redis-server pid was not found: every redis-server on the box counts as its Redis")
    rc = 0
    instances: list[Instance] = []
    try:
        if args.only_locks:
            log("--only-locks: no seckill instances, no strategy matrix")
        else:
            token = secrets.token_urlsafe(24)
            instances = start_instances(plan, run_dir, token)
            ctx = CellContext(pg, redis, instances, token, run_id, run_dir)
            if not args.only_capacity:
                run_matrix(plan, args, ctx, res)
            if plan.lifecycle:
                run_lifecycle(plan.lifecycle, ctx, res)
            if plan.capacity:
                run_wrk_cells(plan, ctx, res)
    except (SetupError, KeyboardInterrupt) as e:
        log(f"ERROR: {e}")
        res.violations.append(f"run aborted: {e}")
        rc = 2
    finally:
        for inst in instances:
            res.service_peak_rss_mib[f"seckill-{inst.name}"] = memory.peak_rss_mib(inst.process.pid)
            code = inst.stop()
            res.service_logs[f"seckill-{inst.name}"] = {"log": rel(inst.log_path), "exit": code, **log_findings(inst.log_text())}
            log(f"seckill #{inst.name} stopped (exit {code})")

    # Ceilings and locks with the instances stopped: they would only steal CPU.
    if rc == 0 and not args.no_ceilings and not args.only_capacity:
        try:
            run_ceilings_and_locks(plan, args, pg, redis, res, run_dir)
        except (SetupError, KeyboardInterrupt) as e:
            log(f"ERROR: {e}")
            res.violations.append(f"ceilings/lockkit aborted: {e}")
            rc = 2
    if res.violations:
        res.kept_sales = f"bench-{run_id}-*"
        log(f"violations: the sales bench-{run_id}-* stay in PostgreSQL for inspection")
    elif not args.keep_sales:
        delete_sales(pg, redis, run_id)

    res.machine["loadavg_end"] = list(os.getloadavg())
    res.finished_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    res.duration_s = round(time.monotonic() - t_start, 1)
    if args.only_capacity:
        res.targets = ([] if args.smoke else capacity_targets(res.capacity)) + memory_targets(res.service_peak_rss_mib)
    else:
        res.targets = evaluate_targets(res.strategies, res.ceilings, res.lockkit, args.smoke, res.capacity, res.latency,
                                       res.service_peak_rss_mib)
    write_results(res, results, stamp, complete=rc == 0)
    print_summary(res)
    if res.violations:
        print("VIOLATIONS:")
        for v in res.violations:
            print(f"  - {v}")
        return rc or 1
    print("all correctness checks held")
    return rc


if __name__ == "__main__":
    sys.exit(main())
