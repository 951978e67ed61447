#!/usr/bin/env python3
"""The comparison runner behind `make bench` (see loadtest/README.md).

Runs, in one go and against the project's own Redis and PostgreSQL (loopback only):

  1. the strategy matrix: every stock strategy x shards (1, 20), k6 open-model load against two
     seckill instances, then the sale's audit, with Redis commands and PostgreSQL commits per
     order; then the throughput cells (stock that outlasts the load) of a few strategies;
  2. the ceilings: the HTTP ceiling (the same k6 arrival model against GET /healthz on the same
     instances), pgbench doing one order's database work (`seckill_commit`), redis-benchmark
     doing lock acquire / release round trips;
  3. lockkit: `lockctl bench` next to the peer lock libraries (loadtest/peers) and the raw Redis
     pair rate at the same concurrency (redis-benchmark without and with pipelining), on one
     Redis, and `lockctl bench` on Redlock over 5 independent masters and on a 3-master Redis
     Cluster (scripts/lock-servers.sh; LOCKKIT_REDLOCK_URL / LOCKKIT_CLUSTER_URL), with the
     Redlock peers (rslock, node-redlock) on the same 5 masters; the Redis CPU time (utime +
     stime of the redis-server processes, /proc/PID/stat) per pair of every run;

and writes loadtest/results/<UTC timestamp>.json, latest.json, latest.md and latest.svg
(`--smoke`: only loadtest/results/smoke-latest.json).

Prerequisites (services, release build, k6, peer harnesses) are installed by scripts/bench.sh,
which then runs this file. Standard library only. Every external run is bounded by a timeout
and by a request count or duration. Exit status: 0 when every correctness check held, 1 when a
check was violated (the violations are listed at the end and in the JSON), 2 on a usage or
set-up error. Speed targets are reported PASS/MISS and never change the exit status.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
import os
import platform
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "loadtest" / "results"  # default of --results-dir
RUN_BASE = ROOT / ".run" / "bench"
# scripts/bench.sh builds `release` for measurements and `debug` (shared with `make test`) for smoke.
PROFILE_DIR = os.environ.get("BENCH_PROFILE", "release")
SECKILL_BIN = ROOT / "target" / PROFILE_DIR / "seckill"
LOCKCTL_BIN = ROOT / "target" / PROFILE_DIR / "lockctl"
K6_SCRIPT = ROOT / "loadtest" / "k6" / "seckill.js"
K6_HEALTHZ = ROOT / "loadtest" / "k6" / "healthz.js"
K6_WRAPPER = ROOT / "scripts" / "k6.sh"
PEERS_RUN = ROOT / "loadtest" / "peers" / "run.sh"

STRATEGIES = ["none", "redis-lock", "sharded-fenced", "db-atomic", "db-pessimistic", "db-optimistic",
              "owned-shards", "owned-unfenced", "redis-gate", "redis-gate-durable"]
# Smoke leaves out the owned-unfenced control (identical to owned-shards without faults) to stay quick.
SMOKE_STRATEGIES = [s for s in STRATEGIES if s != "owned-unfenced"]
# Throughput cells (full mode): stock that outlasts the load, so orders/s is a steady-state rate.
THROUGHPUT_CELLS = "owned-shards/20,db-atomic/20,redis-gate/20,redis-gate-durable/20"
# Throughput cells: 10 000 000 user ids, so that the per-user limit does not cap the sale.
THROUGHPUT_USERS = 10_000_000
# Seconds to wait after a cell's load before reading pg_stat_database: PostgreSQL 15+ backends
# flush their transaction counters when idle, at most once a second.
PG_STATS_SETTLE_S = 1.5
SHARDS = [1, 20]
LOCK_CONCURRENCIES = [1, 16, 64]
CONTENDED_C = 16
PEER_LIBRARIES = ["rslock", "redis-py", "python-redis-lock", "node-redlock"]
# The peers that run Redlock over several independent masters (the others are single-instance locks).
REDLOCK_PEERS = ["node-redlock", "rslock"]
# redis-benchmark -P: the pipelined raw-Redis reference (a multiplexing client pipelines too).
PIPELINE = 16
# Where the multi-node backends come from (scripts/lock-servers.sh env prints these).
REDLOCK_URL_ENV = "LOCKKIT_REDLOCK_URL"
CLUSTER_URL_ENV = "LOCKKIT_CLUSTER_URL"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# k6 thresholds that `none` is expected to cross (it oversells): everything else must hold.
NONE_ALLOWED_FAILURES = {"audit_oversold", "units_accepted"}

# Compare-and-delete: the release half of a lock pair (same logic as every library's release).
RELEASE_SCRIPT = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"

# Mode presets. Every figure can be overridden on the command line (see --help).
PRESETS = {
    "full": {
        "total": 10000, "rate": 4000, "duration_s": 20, "max_vus": 300, "users": 10000,
        "pg_seconds": 10, "pg_clients": 20,
        # redis-benchmark request counts per concurrency (bounded in requests, ~2-4 s each here)
        "redis_n": {1: 40000, 16: 150000, 50: 200000, 64: 200000},
        # the same with -P 16 (~2-4 s each here too)
        "redis_n_pipelined": {1: 250000, 16: 1000000, 64: 1000000},
        "lock_ms": 3000, "peers": True,
    },
    "smoke": {
        "total": 300, "rate": 200, "duration_s": 3, "max_vus": 150, "users": 10000,
        "pg_seconds": 2, "pg_clients": 20,
        "redis_n": {1: 4000, 16: 20000, 50: 20000, 64: 20000},
        "redis_n_pipelined": {1: 20000, 16: 50000, 64: 50000},
        "lock_ms": 500, "peers": False,
    },
}

TARGETS_DOC = {
    "lockkit_vs_redis": "lockkit uncontended >= 80% of the raw Redis pair rate at every concurrency (1, 16, 64)",
    "lockkit_vs_peers": "lockkit uncontended ahead of every peer library at every concurrency (1, 16, 64)",
    "fenced_shard_scaling": "sharded-fenced with 20 shards >= 3x its 1-shard orders/s",
    "fenced_vs_pg": "sharded-fenced with 20 shards >= 60% of pg_order_tps",
    "owned_vs_db_atomic": "owned-shards with 20 shards >= 2x db-atomic with 20 shards in orders/s (throughput cells)",
    "owned_vs_http": "owned-shards with 20 shards >= 60% of the HTTP ceiling (GET /healthz, same arrival model)",
    "owned_redis_per_order": "owned-shards with 20 shards: <= 0.1 Redis commands per order (throughput cell)",
    "owned_pg_per_order": "owned-shards with 20 shards: <= 0.25 PostgreSQL commits per order (throughput cell)",
    "no_oversell": "zero oversold and zero stranded for every strategy except none (owned-unfenced included)",
    "none_oversells": "none oversells (the control shows the race is real)",
}


# ------------------------------------------------------------------------------------------------
# small helpers


class SetupError(Exception):
    """The bench cannot run (missing binary, service not starting...)."""


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def run(cmd, *, timeout: float, env=None, check=False, cwd=None) -> subprocess.CompletedProcess:
    """Runs a command to completion with a hard timeout; output captured as text."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        raise SetupError(f"timed out after {timeout:.0f}s: {' '.join(map(str, cmd))}") from e
    if check and proc.returncode != 0:
        raise SetupError(f"exit {proc.returncode}: {' '.join(map(str, cmd))}\n{proc.stderr[-2000:]}")
    return proc


def first_line(cmd, timeout: float = 20) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def round_or_none(v, nd=1):
    return None if v is None else round(float(v), nd)


def http_json(method: str, url: str, body=None, headers=None, timeout: float = 10.0):
    """(status, parsed JSON or None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            status, raw = res.status, res.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, None


# ------------------------------------------------------------------------------------------------
# PostgreSQL / Redis access through their command-line clients (no drivers needed)


class Pg:
    def __init__(self, url: str):
        u = urllib.parse.urlparse(url)
        self.host = u.hostname or "127.0.0.1"
        self.port = str(u.port or 5432)
        self.user = urllib.parse.unquote(u.username or "postgres")
        self.db = (u.path or "/").lstrip("/") or self.user
        self.env = dict(os.environ)
        if u.password:
            self.env["PGPASSWORD"] = urllib.parse.unquote(u.password)
        self.conn = ["-h", self.host, "-p", self.port, "-U", self.user]

    def query(self, sql: str, timeout: float = 60) -> list[list[str]]:
        cmd = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", *self.conn, "-d", self.db, "-tA", "-F", "\t", "-c", sql]
        proc = run(cmd, timeout=timeout, env=self.env)
        if proc.returncode != 0:
            raise SetupError(f"psql failed: {proc.stderr.strip()[:500]}")
        return [line.split("\t") for line in proc.stdout.splitlines() if line != ""]


class Redis:
    def __init__(self, url: str):
        u = urllib.parse.urlparse(url)
        self.host = u.hostname or "127.0.0.1"
        self.port = str(u.port or 6379)
        self.db = (u.path or "/").lstrip("/") or "0"
        self.env = dict(os.environ)
        if u.password:
            self.env["REDISCLI_AUTH"] = urllib.parse.unquote(u.password)
        self.url = url

    def cli(self, *args: str, timeout: float = 20) -> str:
        proc = run(["redis-cli", "-h", self.host, "-p", self.port, "-n", self.db, *args], timeout=timeout, env=self.env)
        if proc.returncode != 0:
            raise SetupError(f"redis-cli {' '.join(args[:2])} failed: {proc.stderr.strip()[:300]}")
        return proc.stdout.strip()


def redis_total_commands(redis: Redis) -> int | None:
    """The server's total_commands_processed (INFO stats); this INFO itself is counted after it."""
    try:
        m = re.search(r"total_commands_processed:(\d+)", redis.cli("INFO", "stats"))
    except SetupError:
        return None
    return int(m.group(1)) if m else None


def pg_total_commits(pg: Pg) -> int | None:
    """sum(xact_commit) over every database of the server (read-only transactions included)."""
    try:
        rows = pg.query("SELECT sum(xact_commit) FROM pg_stat_database")
    except SetupError:
        return None
    try:
        return int(rows[0][0])
    except (IndexError, ValueError):
        return None


def per_order(delta: int | None, orders: int) -> float | None:
    return None if delta is None or orders <= 0 else round(delta / orders, 4)


def loopback_only(url: str, what: str) -> None:
    host = urllib.parse.urlparse(url).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SetupError(f"{what} must point at a loopback address (got host {host!r})")


def lock_backend(url: str) -> tuple[str, list[str]]:
    """(kind, one redis:// URL per server) of a lockkit URL, as lockkit reads it: `redis://` one
    Redis, `redis+cluster://h:p,h:p` a cluster's seed nodes (the first seed's credentials apply
    to the others), `redlock://h:p,h:p,...` independent masters. Raises SetupError otherwise."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise SetupError("a lock URL needs a scheme (redis://, redis+cluster:// or redlock://)")
    if scheme in ("redis", "rediss"):
        return "redis", [url]
    if scheme not in ("redis+cluster", "rediss+cluster", "redlock", "redlocks"):
        raise SetupError(f"unknown lock URL scheme {scheme!r}")
    node_scheme = "rediss" if scheme in ("rediss+cluster", "redlocks") else "redis"
    hosts = [h.strip() for h in rest.split(",")]
    if not hosts or any(not h or h.startswith("@") or h.endswith("@") for h in hosts):
        raise SetupError(f"{scheme}:// URL with an empty host")
    if scheme.endswith("cluster"):
        creds = hosts[0].rpartition("@")[0] if "@" in hosts[0] else None
        nodes = [f"{node_scheme}://{creds}@{h}" if creds and "@" not in h else f"{node_scheme}://{h}" for h in hosts]
        return "cluster", nodes
    return "redlock", [f"{node_scheme}://{h}" for h in hosts]


def host_port(url: str) -> str:
    u = urllib.parse.urlparse(url)
    return f"{u.hostname}:{u.port or 6379}"


def redis_server_pid(redis: Redis) -> int | None:
    """The pid of the redis-server behind `redis` (INFO server process_id), checked against
    /proc: a live process named redis-server whose title names the same port (loopback servers
    run on this machine; the check guards against a different pid namespace)."""
    try:
        m = re.search(r"process_id:(\d+)", redis.cli("INFO", "server"))
    except SetupError:
        return None
    if not m:
        return None
    pid = int(m.group(1))
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if comm != "redis-server" or f":{redis.port}" not in cmdline:
        return None
    return pid


def cpu_ticks(pids: list[int]) -> int | None:
    """utime + stime (clock ticks, every thread) summed over the processes; None if one is gone."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = stat.rpartition(")")[2].split()  # fields[0] is field 3 (state) of proc(5)
        total += int(fields[11]) + int(fields[12])  # fields 14 utime, 15 stime
    return total


class RedisCpu:
    """Redis CPU time around one run: `with RedisCpu(pids) as cpu: ...`, then cpu.fields(pairs)."""

    def __init__(self, pids: list[int] | None):
        self.pids = list(pids or [])
        self.before = self.after = None

    def __enter__(self):
        self.before = cpu_ticks(self.pids) if self.pids else None
        return self

    def __exit__(self, *exc):
        self.after = cpu_ticks(self.pids) if self.pids else None
        return False

    @property
    def cpu_us(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return (self.after - self.before) * 1e6 / CLK_TCK

    def fields(self, pairs) -> dict:
        us = self.cpu_us
        try:
            n = float(pairs)
        except (TypeError, ValueError):
            n = 0.0
        return {"redis_cpu_ms": None if us is None else round(us / 1000, 1),
                "redis_cpu_us_per_pair": round(us / n, 2) if us is not None and n > 0 else None}


# Where a cell's CPU goes: processes by name. Everything else on the box is "other".
PROFILE_GROUPS = {"seckill": "seckill", "postgres": "postgres", "redis": "redis-server", "k6": "k6"}
# (k6 itself is counted through this runner's children times: it has exited by the second sample.)


def process_ticks() -> dict[int, tuple[str, int]]:
    """pid -> (comm, utime + stime in clock ticks) of every process, and pid 0 -> ("total", the
    machine's busy ticks over all CPUs from /proc/stat)."""
    out: dict[int, tuple[str, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.find("(") + 1:stat.rfind(")")]
        fields = stat.rpartition(")")[2].split()
        out[int(entry.name)] = (comm, int(fields[11]) + int(fields[12]))
    try:
        cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        busy = sum(int(x) for x in cpu) - int(cpu[3]) - int(cpu[4])  # minus idle and iowait
        out[0] = ("total", busy)
    except (OSError, IndexError, ValueError):
        pass
    return out


def cpu_profile(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]], wall_s: float,
                k6_cpu_s: float) -> dict:
    """CPU used by each process group between two samples, in % of one core (a process that
    started in between counts from zero; one that ended is missed, except k6, which has ended by
    the second sample: its CPU time is `k6_cpu_s`, what this runner's waited-for children used)."""
    if wall_s <= 0:
        return {}
    used: dict[str, float] = {g: 0.0 for g in PROFILE_GROUPS}
    used["k6"] = k6_cpu_s * CLK_TCK
    for pid, (comm, ticks) in after.items():
        if pid == 0:
            continue
        earlier = before.get(pid)
        delta = ticks - (earlier[1] if earlier and earlier[0] == comm else 0)
        for group, name in PROFILE_GROUPS.items():
            if comm == name:
                used[group] += delta
    pct = {g: round(t / CLK_TCK / wall_s * 100, 1) for g, t in used.items()}
    if 0 in before and 0 in after:
        total = (after[0][1] - before[0][1]) / CLK_TCK / wall_s * 100
        pct["other"] = round(max(total - sum(pct.values()), 0.0), 1)
        pct["busy"] = round(total, 1)
    pct["cores"] = os.cpu_count() or 0
    return pct


# ------------------------------------------------------------------------------------------------
# seckill instances

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Instance:
    """One release seckill process on a free loopback port (port 0, read back from its log)."""

    def __init__(self, idx: int, run_dir: Path, env: dict):
        self.idx = idx
        self.log_path = run_dir / f"seckill-{idx}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(SECKILL_BIN)], env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.port: int | None = None
        (run_dir / f"seckill-{idx}.pid").write_text(f"{self.proc.pid}\n")
        log(f"seckill #{idx} started, pid {self.proc.pid}, log {self.log_path.relative_to(ROOT)}")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        try:
            return ANSI.sub("", self.log_path.read_text(errors="replace"))
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SetupError(f"seckill #{self.idx} exited with {self.proc.returncode}; see {self.log_path}\n{self.log_text()[-1500:]}")
            if self.port is None:
                m = re.search(r"seckill listening.*?\bport=(\d+)", self.log_text())
                if m:
                    self.port = int(m.group(1))
            if self.port is not None:
                try:
                    status, _ = http_json("GET", f"{self.base}/readyz", timeout=2)
                    if status == 200:
                        log(f"seckill #{self.idx} ready on {self.base}")
                        return
                except OSError:
                    pass
            time.sleep(0.2)
        raise SetupError(f"seckill #{self.idx} not ready within {timeout:.0f}s; see {self.log_path}")

    def stop(self) -> int | None:
        """SIGTERM to our own pid, SIGKILL to the same pid after 15 s; never by name."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                log(f"seckill #{self.idx} (pid {self.proc.pid}) ignored SIGTERM for 15 s; SIGKILL")
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        return self.proc.returncode


def log_findings(text: str, limit: int = 8) -> dict:
    """WARN/ERROR lines of a seckill log (tracing's text format)."""
    warn = [line for line in text.splitlines() if re.search(r"\s(WARN|ERROR)\s", line)]
    return {
        "warn": sum(1 for line in warn if " WARN " in line),
        "error": sum(1 for line in warn if " ERROR " in line),
        "samples": [line[:400] for line in warn[:limit]],
    }


def scrape_metrics(instances: list["Instance"]) -> dict[str, float]:
    """Sum over the instances of every Prometheus series (counters, histogram sums and counts)."""
    total: dict[str, float] = {}
    for inst in instances:
        try:
            with urllib.request.urlopen(f"{inst.base}/metrics", timeout=10) as r:
                text = r.read().decode(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if not line or line.startswith("#") or "_bucket{" in line:
                continue
            series, _, value = line.rpartition(" ")
            try:
                total[series] = total.get(series, 0.0) + float(value)
            except ValueError:
                pass
    return total


def metrics_delta(before: dict[str, float], after: dict[str, float]) -> dict:
    """What the services did during one cell: lock and order figures from their own metrics."""
    def d(series):
        return after.get(series, 0.0) - before.get(series, 0.0)

    def avg_ms(prefix, label=""):
        n = d(f"{prefix}_count{label}")
        return round(d(f"{prefix}_sum{label}") / n * 1000, 2) if n > 0 else None

    return {
        "lock_acquired": int(d('lockkit_acquire_attempts_total{outcome="acquired"}')),
        "lock_attempts_held": int(d('lockkit_acquire_attempts_total{outcome="held"}')),
        "lock_wait_ms_avg": avg_ms("lockkit_acquire_wait_seconds", '{outcome="acquired"}'),
        "lock_wait_timeouts": int(d('lockkit_acquire_wait_seconds_count{outcome="timeout"}')),
        "lock_hold_ms_avg": avg_ms("lockkit_hold_seconds"),
        "orders_accepted": int(d('seckill_orders_total{outcome="accepted"}')),
        "orders_busy": int(d('seckill_orders_total{outcome="busy"}')),
        "order_ms_avg_accepted": avg_ms("seckill_order_duration_seconds", '{outcome="accepted"}'),
        "order_ms_avg_sold_out": avg_ms("seckill_order_duration_seconds", '{outcome="sold_out"}'),
    }


# ------------------------------------------------------------------------------------------------
# strategy matrix


def iso_to_epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def metric(summary: dict, name: str, stat: str, default=0):
    m = summary.get("metrics", {}).get(name)
    if not m:
        return default
    return m.get("values", {}).get(stat, default)


def run_cell(args, cfg, pg: Pg, redis: Redis, instances: list[Instance], token: str, run_id: str, run_dir: Path,
             strategy: str, shards: int, kind: str = "mission") -> dict:
    """One cell. kind "mission": the sale of cfg["total"] units (sells out); "throughput": the
    caller's cfg has a stock that outlasts the load, so orders/s is a steady-state rate."""
    suffix = "" if kind == "mission" else "-tp"
    sku = f"bench-{run_id}-{strategy}-{shards}{suffix}"
    summary_path = run_dir / f"k6-{strategy}-{shards}{suffix}.json"
    k6_log = run_dir / f"k6-{strategy}-{shards}{suffix}.log"
    env = dict(os.environ)
    env.update({
        "TARGETS": ",".join(i.base for i in instances),
        "SKU": sku,
        "PROFILE": "constant",
        "RATE": str(cfg["rate"]),
        "DURATION": f"{cfg['duration_s']}s",
        "USERS": str(cfg["users"]),
        "SETUP_SALE": "1",
        "ADMIN_TOKEN": token,
        "TOTAL": str(cfg["total"]),
        "SHARDS": str(shards),
        "PER_USER_LIMIT": "2",
        "MAX_PER_ORDER": "2",
        "STRATEGY": strategy,
        "MAX_VUS": str(cfg["max_vus"]),
        "PRE_VUS": str(min(cfg["max_vus"], max(10, cfg["rate"] // 5))),
        "SUMMARY_PATH": str(summary_path),
        "LOG_UNEXPECTED": "2",
    })
    log_offsets = [i.log_path.stat().st_size for i in instances]
    metrics_before = scrape_metrics(instances)
    # Per-order costs: server-wide counters around the whole cell (k6 setup with the sale PUT,
    # the load, k6 teardown with the audit).
    redis_before, pg_before = redis_total_commands(redis), pg_total_commits(pg)
    limit = cfg["duration_s"] + 150  # load + gracefulStop 10 s + setup/teardown bounds
    cpu_before, children_before = process_ticks(), os.times()
    t0 = time.monotonic()
    with open(k6_log, "wb") as out:
        proc = subprocess.Popen(["bash", str(K6_WRAPPER), "-q", "--no-color", str(K6_SCRIPT)], env=env, cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=limit)
        except BaseException as e:  # timeout, or interrupted: never leave our k6 behind
            if not isinstance(e, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
                raise
            log(f"k6 {strategy}/{shards} exceeded {limit}s; stopping it (pid {proc.pid})")
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            rc = rc if rc else -1
    wall = time.monotonic() - t0
    cpu_after, children_after = process_ticks(), os.times()
    # k6 (and its wrapper) ended before the second sample; its CPU went to this process's children.
    k6_cpu_s = (children_after.children_user + children_after.children_system
                - children_before.children_user - children_before.children_system)

    time.sleep(PG_STATS_SETTLE_S)
    redis_after, pg_after = redis_total_commands(redis), pg_total_commits(pg)
    metrics_after = scrape_metrics(instances)
    cell: dict = {"strategy": strategy, "shards": shards, "cell": kind, "total": cfg["total"], "users": cfg["users"],
                  "sku": sku, "k6_exit": rc, "k6_wall_s": round(wall, 1),
                  "k6_summary": str(summary_path.relative_to(ROOT)), "k6_log": str(k6_log.relative_to(ROOT)),
                  "cpu_profile": cpu_profile(cpu_before, cpu_after, wall, k6_cpu_s)}
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        summary = {}
    sk = summary.get("seckill", {})
    outcomes = sk.get("outcomes", {})
    cell["k6_verdict"] = sk.get("verdict", "missing")
    cell["failed_thresholds"] = sorted({t.get("metric", "?") for t in sk.get("failed_thresholds", [])})

    # The audit, read again here from the *second* instance (k6 read it from the first).
    audit = None
    try:
        status, body = http_json("GET", f"{instances[-1].base}/v1/sales/{sku}/audit", timeout=30)
        if status == 200 and isinstance(body, dict):
            audit = body
        else:
            cell["audit_error"] = f"status {status}: {str(body)[:200]}"
    except OSError as e:
        cell["audit_error"] = str(e)
    cell["audit"] = audit

    # Server-side timing of the accepted orders (see orders_per_sec in loadtest/README.md).
    rows = pg.query(
        "SELECT count(*), COALESCE(sum(quantity), 0), extract(epoch FROM min(created_at)), "
        f"extract(epoch FROM max(created_at)) FROM orders WHERE sku = '{sku}'"
    )
    n_orders, units, first_at, last_at = (rows[0] + [None] * 4)[:4] if rows else (0, 0, None, None)
    n_orders, units = int(n_orders or 0), int(units or 0)
    first_at = float(first_at) if first_at not in (None, "") else None
    last_at = float(last_at) if last_at not in (None, "") else None
    load_start = iso_to_epoch((summary.get("setup_data") or {}).get("startedAt")) or first_at
    # When 95% of the stock had been sold: shows a slow tail (the last units scattered over shards).
    t95 = pg.query(
        "SELECT extract(epoch FROM min(created_at)) FROM (SELECT created_at, sum(quantity) OVER (ORDER BY created_at, id) AS cum "
        f"FROM orders WHERE sku = '{sku}') o WHERE cum >= 0.95 * {cfg['total']}"
    )
    t95_at = float(t95[0][0]) if t95 and t95[0] and t95[0][0] not in (None, "") else None
    sold_out = int(outcomes.get("sold_out", 0) or 0) > 0
    if load_start is not None and last_at is not None:
        end = last_at if sold_out else load_start + cfg["duration_s"]
        window = max(end - load_start, 1e-3)
    else:
        window = None
    cell.update({
        "orders_per_sec": round(n_orders / window, 1) if window else 0.0,
        "units_per_sec": round(units / window, 1) if window else 0.0,
        "window_s": round_or_none(window, 3),
        "sold_out_reached": sold_out,
        "sold_95pct_after_s": round(t95_at - load_start, 3) if t95_at is not None and load_start is not None else None,
        "p50_ms": round_or_none(metric(summary, "order_latency", "med", None), 2),
        "p99_ms": round_or_none(metric(summary, "order_latency", "p(99)", None), 2),
        "orders": n_orders,
        "sold": (audit or {}).get("sold", units),
        "remaining": (audit or {}).get("remaining"),
        "oversold": (audit or {}).get("oversold"),
        "stranded": (audit or {}).get("stranded"),
        "duplicates": (audit or {}).get("duplicates"),
        "consistent": (audit or {}).get("consistent"),
        "users_over_limit": (audit or {}).get("users_over_limit"),
        "fence_rejections": (audit or {}).get("fence_rejections"),
        "busy": int(outcomes.get("busy", 0) or 0),
        "errors": int(outcomes.get("unexpected", 0) or 0),
        "server_errors": int(outcomes.get("server_errors", 0) or 0),
        "accepted": int(outcomes.get("orders_accepted", 0) or 0),
        "units_accepted": int(outcomes.get("units_accepted", 0) or 0),
        "replayed": int(outcomes.get("orders_replayed", 0) or 0),
        "sold_out_answers": int(outcomes.get("sold_out", 0) or 0),
        "user_limit": int(outcomes.get("user_limit", 0) or 0),
        "invalid_rejected": int(outcomes.get("invalid_rejected", 0) or 0),
        "requests": int(metric(summary, "http_reqs", "count", 0) or 0),
        "dropped_iterations": int(metric(summary, "dropped_iterations", "count", 0) or 0),
        "max_vus": int(metric(summary, "vus_max", "max", 0) or 0),
        "k6_notes": sk.get("notes", []),
        "service_metrics": metrics_delta(metrics_before, metrics_after),
    })
    redis_cmds = redis_after - redis_before if redis_after is not None and redis_before is not None else None
    pg_commits = pg_after - pg_before if pg_after is not None and pg_before is not None else None
    cell.update({
        "redis_commands": redis_cmds,
        "pg_commits": pg_commits,
        "redis_cmds_per_order": per_order(redis_cmds, n_orders),
        "pg_commits_per_order": per_order(pg_commits, n_orders),
    })
    # Reasons for unexpected answers (k6 logs the first few per VU).
    try:
        reasons = re.findall(r"unexpected answer \(([^)]*)\)", k6_log.read_text(errors="replace"))
    except OSError:
        reasons = []
    cell["unexpected_reasons"] = sorted(set(reasons))[:10]
    # Service log lines written during this cell.
    findings = []
    for inst, off in zip(instances, log_offsets):
        with open(inst.log_path, "rb") as fh:
            fh.seek(off)
            findings.append(log_findings(ANSI.sub("", fh.read().decode(errors="replace")), limit=4))
    cell["service_log"] = {"warn": sum(f["warn"] for f in findings), "error": sum(f["error"] for f in findings),
                           "samples": [s for f in findings for s in f["samples"]][:6]}
    cell["violations"] = check_cell(cell, args.smoke)
    return cell


def cell_name(cell: dict) -> str:
    return f"{cell['strategy']}/{cell['shards']}" + (" (throughput)" if cell.get("cell") == "throughput" else "")


def check_cell(cell: dict, smoke: bool) -> list[str]:
    """Correctness checks of one cell; returns human-readable violations."""
    v: list[str] = []
    name = cell_name(cell)
    a = cell.get("audit")
    rc, failed = cell["k6_exit"], set(cell["failed_thresholds"])
    if cell["k6_verdict"] in ("missing", "aborted") or rc not in (0, 99):
        v.append(f"{name}: k6 did not complete (exit {rc}, verdict {cell['k6_verdict']}); see {cell['k6_log']}")
    if a is None:
        v.append(f"{name}: audit unreadable ({cell.get('audit_error')})")
        return v
    if cell["strategy"] == "none":
        # The control: oversell is expected; everything else (5xx, duplicates, ...) must still hold.
        other = failed - NONE_ALLOWED_FAILURES
        if other:
            why = f" (answers: {', '.join(cell['unexpected_reasons'])})" if cell.get("unexpected_reasons") else ""
            v.append(f"{name}: k6 thresholds other than oversell crossed: {', '.join(sorted(other))}{why}")
        if a.get("duplicates", 0) != 0:
            v.append(f"{name}: audit duplicates={a.get('duplicates')}")
        if not smoke and a.get("oversold", 0) <= 0:
            v.append(f"{name}: the control did not oversell (oversold=0): the load did not race")
        if not smoke and rc == 0:
            v.append(f"{name}: k6 exited 0 although none is expected to cross the oversold threshold")
        return v
    if rc != 0 or failed:
        why = f" (answers: {', '.join(cell['unexpected_reasons'])})" if cell.get("unexpected_reasons") else ""
        v.append(f"{name}: k6 thresholds crossed (exit {rc}): {', '.join(sorted(failed)) or '?'}{why}")
    for field in ("oversold", "duplicates", "stranded", "users_over_limit"):
        if a.get(field, 0) != 0:
            v.append(f"{name}: audit {field}={a.get(field)}")
    if a.get("consistent") is not True:
        v.append(f"{name}: audit consistent={a.get('consistent')}")
    return v


# ------------------------------------------------------------------------------------------------
# ceilings


def http_ceiling(cfg, instances: list[Instance], run_dir: Path) -> dict:
    """The same k6 arrival model as the cells (rate, duration, VU pool, both instances round-robin)
    against GET /healthz: what HTTP alone reaches on these instances with k6 on the same machine."""
    summary_path = run_dir / "k6-healthz.json"
    k6_log = run_dir / "k6-healthz.log"
    env = dict(os.environ)
    env.update({
        "TARGETS": ",".join(i.base for i in instances),
        "RATE": str(cfg["rate"]),
        "DURATION": f"{cfg['duration_s']}s",
        "MAX_VUS": str(cfg["max_vus"]),
        "PRE_VUS": str(min(cfg["max_vus"], max(10, cfg["rate"] // 5))),
        "SUMMARY_PATH": str(summary_path),
        "LOG_UNEXPECTED": "2",
    })
    limit = cfg["duration_s"] + 90
    with open(k6_log, "wb") as out:
        proc = subprocess.Popen(["bash", str(K6_WRAPPER), "-q", "--no-color", str(K6_HEALTHZ)], env=env, cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=limit)
        except BaseException:  # timeout, or interrupted: never leave our k6 behind
            proc.kill()
            proc.wait()
            raise
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        raise SetupError(f"k6 healthz run left no summary (exit {rc}); see {k6_log}")
    h = summary.get("healthz", {})
    return {
        "http_ok_per_sec": round(float(h.get("ok_per_sec", 0.0)), 1),
        "ok": int(h.get("ok", 0)),
        "unexpected": int(h.get("unexpected", 0)),
        "dropped_iterations": int(h.get("dropped_iterations", 0)),
        "rate": cfg["rate"], "duration_s": cfg["duration_s"], "max_vus": cfg["max_vus"],
        "p50_ms": round_or_none(metric(summary, "healthz_latency", "med", None), 2),
        "p99_ms": round_or_none(metric(summary, "healthz_latency", "p(99)", None), 2),
        "capped_by_offered_rate": int(h.get("dropped_iterations", 0)) == 0,
        "k6_exit": rc, "k6_log": str(k6_log.relative_to(ROOT)),
        "what": "k6 constant-arrival-rate, same rate, duration and VU pool as the cells, GET /healthz on both instances "
                "round-robin; 200 answers / load duration",
    }


def pgbench_ceiling(pg: Pg, run_id: str, run_dir: Path, seconds: int, clients: int) -> dict:
    """One order's database work at full speed: `seckill_commit` with the 'atomic' guard.

    The function is what every strategy's order ends in (shard UPDATE, per-user upsert, INSERT
    into orders and order_parts, in one transaction and one round trip), so this stays in step
    with the migration. A scratch sale with 20 shards and practically unlimited stock is created
    first and deleted (with all its orders) afterwards.
    """
    sku = f"bench-pg-{run_id}"
    per_shard = 100_000_000
    script = run_dir / "pgbench-order.sql"
    script.write_text(
        "\\set shard random(0, 19)\n"
        "\\set user random(1, 10000)\n"
        f"SELECT order_id FROM seckill_commit('{sku}', 'pgb-' || :user, 1, gen_random_uuid()::text, 1000000000, "
        "ARRAY[:shard], ARRAY[1], ARRAY[0], 'atomic', ARRAY[0]::bigint[]);\n"
    )
    pg.query(
        f"DELETE FROM sales WHERE sku = '{sku}'; "
        "INSERT INTO sales (sku, total, shard_count, per_user_limit, max_per_order, strategy, generation) "
        f"VALUES ('{sku}', {per_shard * 20}, 20, 1000000000, 1, 'db-atomic', 1); "
        f"INSERT INTO shards (sku, shard, initial, remaining) SELECT '{sku}', g, {per_shard}, {per_shard} "
        "FROM generate_series(0, 19) g;"
    )
    try:
        cmd = ["pgbench", "-n", *pg.conn, "-c", str(clients), "-j", "2", "-T", str(seconds), "-f", str(script), pg.db]
        proc = run(cmd, timeout=seconds + 60, env=pg.env)
        text = proc.stdout + proc.stderr
        (run_dir / "pgbench.log").write_text(text)
        m = re.search(r"tps = ([\d.]+) \(without initial connection time\)", text)
        lat = re.search(r"latency average = ([\d.]+) ms", text)
        failed = re.search(r"number of failed transactions: (\d+)", text)
        tx = re.search(r"number of transactions actually processed: (\d+)", text)
        if proc.returncode != 0 or not m:
            raise SetupError(f"pgbench failed (exit {proc.returncode}): {text[-800:]}")
        check = pg.query(f"SELECT count(*) FROM orders WHERE sku = '{sku}'")
        return {
            "pg_order_tps": round(float(m.group(1)), 1),
            "latency_avg_ms": float(lat.group(1)) if lat else None,
            "transactions": int(tx.group(1)) if tx else None,
            "failed_transactions": int(failed.group(1)) if failed else None,
            "orders_written": int(check[0][0]) if check else None,
            "clients": clients, "seconds": seconds,
            "what": "SELECT seckill_commit(..., guard 'atomic'): shard UPDATE ... remaining >= 1 on a random one "
                    "of 20 shards + user_purchases upsert + INSERT orders + INSERT order_parts, one transaction",
        }
    finally:
        pg.query(f"DELETE FROM sales WHERE sku = '{sku}'", timeout=120)


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
    with RedisCpu(pids) as cpu_a:
        acquire = redis_benchmark(redis, ["SET", key, "tok", "NX", "PX", "30000"], clients, n, pipeline)
    with RedisCpu(pids) as cpu_r:
        release = redis_benchmark(redis, ["EVALSHA", sha, "1", key, "tok"], clients, n, pipeline)
    pairs = 1.0 / (1.0 / acquire["rps"] + 1.0 / release["rps"])
    out = {"concurrency": clients, "pipeline": pipeline, "requests_each": n, "set_nx_px": acquire,
           "evalsha_release": release, "pairs_per_sec": round(pairs, 1)}
    if cpu_a.cpu_us is not None and cpu_r.cpu_us is not None:
        acquire["redis_cpu_us_per_op"] = round(cpu_a.cpu_us / n, 2)
        release["redis_cpu_us_per_op"] = round(cpu_r.cpu_us / n, 2)
        out["redis_cpu_us_per_pair"] = round((cpu_a.cpu_us + cpu_r.cpu_us) / n, 2)
    else:
        out["redis_cpu_us_per_pair"] = None
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


# ------------------------------------------------------------------------------------------------
# lockkit and peers


class LockBackend:
    """One lockkit backend of the comparison: its URL, servers and their redis-server pids."""

    def __init__(self, name: str, label: str, url: str):
        self.name, self.label, self.url = name, label, url
        self.kind, self.node_urls = lock_backend(url)
        self.nodes = [Redis(u) for u in self.node_urls]
        self.pids: list[int] = []
        self.error: str | None = None

    def check(self) -> None:
        """Every server must answer PING; pids found for the CPU figures (missing: figures None)."""
        for node in self.nodes:
            try:
                pong = node.cli("PING", timeout=5)
            except SetupError as e:
                raise SetupError(f"{self.label}: {host_port(node.url)} does not answer: {e}") from e
            if pong != "PONG":
                raise SetupError(f"{self.label}: {host_port(node.url)} answered {pong!r} to PING")
        pids = [redis_server_pid(node) for node in self.nodes]
        if all(pids):
            self.pids = pids
        else:
            log(f"{self.label}: redis-server pid not found for every server: no Redis CPU figures")

    def describe(self) -> dict:
        return {"label": self.label, "kind": self.kind, "nodes": [host_port(u) for u in self.node_urls],
                "redis_pids": self.pids}


def lockctl_bench(url: str, concurrency: int, duration_ms: int, locks: int | None, pids: list[int] | None = None) -> dict:
    cmd = [str(LOCKCTL_BIN), "--url", url, "bench", "--concurrency", str(concurrency), "--duration-ms", str(duration_ms)]
    if locks is not None:
        cmd += ["--locks", str(locks)]
    with RedisCpu(pids) as cpu:
        proc = run(cmd, timeout=duration_ms / 1000 + 60)
    line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    mode = "contended" if locks == 1 else "uncontended"
    try:
        out = json.loads(line)
        if proc.returncode != 0 or "pairs_per_sec" not in out:
            raise ValueError
    except ValueError:
        return {"concurrency": concurrency, "locks": locks or concurrency, "mode": mode,
                "error": f"exit {proc.returncode}: {(line + ' ' + proc.stderr[-300:]).strip()}"}
    out["mode"] = mode
    out.update(cpu.fields(out.get("pairs")))
    return out


def peer_run(library: str, mode: str, concurrency: int, urls: list[str], duration_ms: int,
             pids: list[int] | None = None) -> tuple[dict, int]:
    """One run of loadtest/peers/run.sh (one library, one mode, one concurrency), so that the
    Redis CPU time around it is this run's alone. Returns (JSON line, run.sh exit status)."""
    env = dict(os.environ)
    env.update({"DURATION_MS": str(duration_ms), "LIBRARIES": library, "MODES": mode,
                "CONCURRENCIES": str(concurrency), "CONTENDED_C": str(concurrency),
                "REDIS_URL": urls[0], "REDIS_URLS": ",".join(urls)})
    with RedisCpu(pids) as cpu:
        proc = run(["bash", str(PEERS_RUN)], timeout=duration_ms / 1000 + 45, env=env)
    row = None
    for line in proc.stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            pass
    if row is None:
        row = {"library": library, "mode": mode, "concurrency": concurrency,
               "error": f"run.sh exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    row.setdefault("concurrency", concurrency)
    if "error" not in row:
        row.update(cpu.fields(row.get("pairs")))
    return row, proc.returncode


def peers_bench(backend: LockBackend, libraries: list[str], duration_ms: int) -> tuple[list[dict], int]:
    rows, rc = [], 0
    plan = [(lib, "uncontended", c) for lib in libraries for c in LOCK_CONCURRENCIES]
    plan += [(lib, "contended", CONTENDED_C) for lib in libraries]
    plan.sort(key=lambda x: libraries.index(x[0]))  # per library: uncontended, then contended
    for lib, mode, c in plan:
        row, code = peer_run(lib, mode, c, backend.node_urls, duration_ms, backend.pids)
        row["backend"] = backend.name
        rows.append(row)
        rc = rc or code
        log(f"    {lib} {mode} C={c}: " + (f"error {row['error']}" if "error" in row else
            f"{float(row.get('pairs_per_sec') or 0):.0f} pairs/s, p99 {row.get('p99_us')} us, "
            f"Redis CPU {row.get('redis_cpu_us_per_pair')} us/pair"))
    return rows, rc


def lockkit_section(redis: Redis, cfg: dict, run_id: str, redis_by_c: dict, backends: list[LockBackend],
                    redis_piped_by_c: dict | None = None) -> dict:
    """lockctl bench on every backend (the first is the one Redis), then the peers: all of them on
    the one Redis, the Redlock peers on the Redlock backend."""
    ms = cfg["lock_ms"]
    redis_piped_by_c = redis_piped_by_c or {}
    out_backends: dict[str, dict] = {}
    for be in backends:
        entry = out_backends[be.name] = {**be.describe(), "runs": [], "peers": [], "peers_exit": None}
        if be.error:
            entry["error"] = be.error
            log(f"lockctl on {be.label}: not run ({be.error})")
            continue
        plan = [(c, None) for c in LOCK_CONCURRENCIES] + [(CONTENDED_C, 1)]
        for c, locks in plan:
            what = f"uncontended C={c}" if locks is None else f"contended C={c} --locks 1"
            r = lockctl_bench(be.url, c, ms, locks, be.pids)
            r["backend"] = be.name
            entry["runs"].append(r)
            log(f"lockctl bench on {be.label}, {what} ({ms} ms): " + (f"error {r['error']}" if "error" in r else
                f"{r['pairs_per_sec']:.0f} pairs/s, p99 {r.get('p99_us')} us, Redis CPU {r.get('redis_cpu_us_per_pair')} us/pair"))

    if cfg["peers"]:
        for be in backends:
            libs = PEER_LIBRARIES if be.kind == "redis" else REDLOCK_PEERS if be.kind == "redlock" else []
            if be.error or not libs:
                continue
            log(f"peer harnesses on {be.label} (loadtest/peers/run.sh, {ms} ms per run)")
            rows, rc = peers_bench(be, libs, ms)
            out_backends[be.name]["peers"] = rows
            out_backends[be.name]["peers_exit"] = rc

    first = out_backends[backends[0].name]
    lock_runs, peers = first["runs"], first["peers"]
    ratios = {}
    for r in lock_runs:
        if r.get("mode") != "uncontended" or "pairs_per_sec" not in r:
            continue
        c = r["concurrency"]
        raw = redis_by_c.get(c, {}).get("pairs_per_sec")
        piped = redis_piped_by_c.get(c, {}).get("pairs_per_sec")
        entry = {"lockkit_pairs_per_sec": r["pairs_per_sec"], "redis_pairs_per_sec": raw,
                 "vs_redis": round(r["pairs_per_sec"] / raw, 3) if raw else None,
                 "redis_pipelined_pairs_per_sec": piped,
                 "vs_redis_pipelined": round(r["pairs_per_sec"] / piped, 3) if piped else None, "vs_peers": {}}
        for p in peers:
            if p.get("mode") == "uncontended" and p.get("concurrency") == c and p.get("pairs_per_sec"):
                entry["vs_peers"][p["library"]] = round(r["pairs_per_sec"] / float(p["pairs_per_sec"]), 3)
        ratios[str(c)] = entry
    return {
        "duration_ms": ms,
        "lockctl": lock_runs,
        "peers": peers,
        "peers_exit": first["peers_exit"],
        "backends": out_backends,
        "redis_pairs": {str(c): v for c, v in redis_by_c.items()},
        "redis_pairs_pipelined": {str(c): v for c, v in redis_piped_by_c.items()},
        "pipeline": PIPELINE,
        "ratios": ratios,
        "contended_c": CONTENDED_C,
        "note": "uncontended: each worker its own lock (locks = concurrency); contended: --locks 1. "
                "Ratios compare pairs/s at the same concurrency; vs_redis (the target) against redis-benchmark "
                f"without pipelining, vs_redis_pipelined (informational) against redis-benchmark -P {PIPELINE}.",
        "cpu_note": "redis_cpu_us_per_pair: utime+stime of the backend's redis-server processes (/proc/PID/stat, "
                    "summed over the nodes) after the run minus before it, over the run's pairs; the window includes "
                    "the client's start-up and warm-up (a few commands) and the servers' idle housekeeping.",
    }


# ------------------------------------------------------------------------------------------------
# targets


def evaluate_targets(cells: list[dict], ceilings: dict, lk: dict, smoke: bool) -> list[dict]:
    out = []

    def add(key, ok, detail):
        out.append({"id": key, "target": TARGETS_DOC[key], "status": "PASS" if ok else "MISS", "detail": detail})

    by = {(c["strategy"], c["shards"]): c for c in cells if c.get("cell", "mission") == "mission"}
    tp = {(c["strategy"], c["shards"]): c for c in cells if c.get("cell") == "throughput"}

    # lockkit vs raw redis
    ratios = lk.get("ratios", {})
    if all(str(c) in ratios and ratios[str(c)]["vs_redis"] is not None for c in LOCK_CONCURRENCIES):
        vals = {c: ratios[str(c)]["vs_redis"] for c in LOCK_CONCURRENCIES}
        piped = {c: ratios[str(c)].get("vs_redis_pipelined") for c in LOCK_CONCURRENCIES}
        info = ""
        if all(v is not None for v in piped.values()):  # informational: not part of the target
            info = (f"; informational, vs redis-benchmark -P {PIPELINE}: "
                    + ", ".join(f"C={c}: {v * 100:.0f}%" for c, v in piped.items()))
        add("lockkit_vs_redis", all(v >= 0.8 for v in vals.values()),
            ", ".join(f"C={c}: {v * 100:.0f}%" for c, v in vals.items()) + info)
    else:
        add("lockkit_vs_redis", False, "no data")
    # lockkit vs peers
    if lk.get("peers"):
        worst = []
        ok = True
        for c in LOCK_CONCURRENCIES:
            r = ratios.get(str(c), {})
            vp = r.get("vs_peers", {})
            missing = [lib for lib in PEER_LIBRARIES if lib not in vp]
            if missing or not vp:
                ok = False
                worst.append(f"C={c}: no data for {', '.join(missing) or 'any peer'}")
                continue
            lib, ratio = min(vp.items(), key=lambda kv: kv[1])
            ok &= ratio > 1.0
            worst.append(f"C={c}: x{ratio:.2f} vs {lib} (closest)")
        add("lockkit_vs_peers", ok, "; ".join(worst))
    else:
        add("lockkit_vs_peers", False, "peers not run" + (" (smoke mode)" if smoke else ""))
    # sharded-fenced scaling
    f1, f20 = by.get(("sharded-fenced", 1)), by.get(("sharded-fenced", 20))
    if f1 and f20 and f1["orders_per_sec"]:
        x = f20["orders_per_sec"] / f1["orders_per_sec"]
        add("fenced_shard_scaling", x >= 3.0, f"{f20['orders_per_sec']:.0f} / {f1['orders_per_sec']:.0f} orders/s = x{x:.2f}")
    else:
        add("fenced_shard_scaling", False, "no data")
    tps = ceilings.get("pg", {}).get("pg_order_tps")
    if f20 and tps:
        x = f20["orders_per_sec"] / tps
        add("fenced_vs_pg", x >= 0.6, f"{f20['orders_per_sec']:.0f} orders/s = {x * 100:.0f}% of {tps:.0f} tps")
    else:
        add("fenced_vs_pg", False, "no data")
    # owned-shards: speed against db-atomic and the HTTP ceiling, and per-order costs. Judged on the
    # throughput cells (steady-state selling) when they ran, else on the mission cells; the other
    # cell's figure is given in the detail.
    def pick(strategy):
        if (strategy, 20) in tp:
            return tp[(strategy, 20)], "throughput"
        if (strategy, 20) in by:
            return by[(strategy, 20)], "mission"
        return None, None

    o20, o_kind = pick("owned-shards")
    a20, a_kind = pick("db-atomic")
    o_mission = by.get(("owned-shards", 20))
    if o20 and a20 and o_kind == a_kind and a20["orders_per_sec"]:
        x = o20["orders_per_sec"] / a20["orders_per_sec"]
        extra = ""
        am = by.get(("db-atomic", 20))
        if o_kind == "throughput" and o_mission and am and am["orders_per_sec"]:
            extra = f"; mission cells: {o_mission['orders_per_sec']:.0f} / {am['orders_per_sec']:.0f} = x{o_mission['orders_per_sec'] / am['orders_per_sec']:.2f}"
        profile = ""
        cpu = o20.get("cpu_profile") or {}
        if x < 2.0 and cpu.get("busy") is not None:
            profile = (f"; CPU during the owned-shards cell: {cpu['busy']:.0f}% busy of {cpu.get('cores', 0) * 100}% "
                       f"(seckill {cpu.get('seckill', 0):.0f}, postgres {cpu.get('postgres', 0):.0f}, k6 {cpu.get('k6', 0):.0f}, "
                       f"redis {cpu.get('redis', 0):.0f})")
        add("owned_vs_db_atomic", x >= 2.0,
            f"{o_kind} cells: {o20['orders_per_sec']:.0f} / {a20['orders_per_sec']:.0f} orders/s = x{x:.2f}{extra}{profile}")
    else:
        add("owned_vs_db_atomic", False, "no data")
    http = (ceilings.get("http") or {}).get("http_ok_per_sec")
    if o20 and http:
        x = o20["orders_per_sec"] / http
        add("owned_vs_http", x >= 0.6, f"{o_kind} cell: {o20['orders_per_sec']:.0f} orders/s = {x * 100:.0f}% of {http:.0f} req/s")
    else:
        add("owned_vs_http", False, "no data" + (" (HTTP ceiling not run)" if not http else ""))
    for key, field, limit, unit in (("owned_redis_per_order", "redis_cmds_per_order", 0.1, "Redis commands"),
                                    ("owned_pg_per_order", "pg_commits_per_order", 0.25, "PostgreSQL commits")):
        if o20 and o20.get(field) is not None:
            v = o20[field]
            extra = ""
            if o_kind == "throughput" and o_mission and o_mission.get(field) is not None:
                extra = f"; mission cell: {o_mission[field]:.3f}"
            add(key, v <= limit, f"{o_kind} cell: {v:.3f} {unit} per order ({o20['orders']} orders){extra}")
        else:
            add(key, False, "no data")
    # correctness
    bad = [f"{cell_name(c)}: oversold={c['oversold']} stranded={c['stranded']}"
           for c in cells if c["strategy"] != "none" and (c["oversold"] != 0 or c["stranded"] != 0)]
    others = [c for c in cells if c["strategy"] != "none"]
    add("no_oversell", bool(others) and not bad, "; ".join(bad) if bad else f"{len(others)} cells clean")
    nones = [c for c in cells if c["strategy"] == "none"]
    add("none_oversells", bool(nones) and all((c["oversold"] or 0) > 0 for c in nones),
        ", ".join(f"{c['shards']} shard(s): oversold={c['oversold']}" for c in nones) or "not run")
    return out


# ------------------------------------------------------------------------------------------------
# machine info


def machine_info(pg: Pg, redis: Redis) -> dict:
    info = {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "kernel": platform.release(),
        "os": None,
        "cpu_model": None,
        "mem_total_kb": None,
        "python": platform.python_version(),
    }
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                info["os"] = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    try:
        m = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
        info["cpu_model"] = m.group(1).strip() if m else None
        m = re.search(r"MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text())
        info["mem_total_kb"] = int(m.group(1)) if m else None
    except OSError:
        pass
    try:
        server = redis.cli("INFO", "server")
        m = re.search(r"redis_version:(\S+)", server)
        info["redis_server"] = m.group(1) if m else None
    except SetupError:
        info["redis_server"] = None
    info["redis_benchmark"] = first_line(["redis-benchmark", "--version"])
    try:
        info["postgres_server"] = pg.query("SHOW server_version")[0][0]
        info["postgres_settings"] = {k: pg.query(f"SHOW {k}")[0][0] for k in ("fsync", "synchronous_commit", "shared_buffers", "max_connections")}
    except (SetupError, IndexError):
        info["postgres_server"] = None
    info["pgbench"] = first_line(["pgbench", "--version"])
    k6 = shutil.which("k6") or (str(ROOT / ".run/k6-venv/bin/k6") if (ROOT / ".run/k6-venv/bin/k6").exists() else None)
    info["k6"] = first_line([k6, "version"]) if k6 else None
    info["rustc"] = first_line(["rustc", "--version"])
    info["node"] = first_line(["node", "--version"])
    info["loadavg_start"] = list(os.getloadavg())
    return info


def git_info() -> dict:
    def g(*a):
        p = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=20)
        return p.stdout.strip() if p.returncode == 0 else None

    status = g("status", "--porcelain", "--untracked-files=no")
    return {"commit": g("rev-parse", "HEAD"), "short": g("rev-parse", "--short", "HEAD"), "branch": g("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty": bool(status)}


# ------------------------------------------------------------------------------------------------
# reports


def fmt(v, nd=0):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int,)) or nd == 0:
        return f"{float(v):,.0f}".replace(",", " ") if abs(float(v)) >= 10000 else f"{float(v):.0f}"
    return f"{float(v):.{nd}f}"


def markdown(res: dict) -> str:
    m, g = res["machine"], res["git"]
    s = res["settings"]
    L = []
    L.append(f"# seckill comparison: {res['started_at']}")
    L.append("")
    L.append(f"Commit `{g.get('short')}`{' (dirty tree)' if g.get('dirty') else ''}, mode **{res['mode']}**, "
             f"{res['duration_s']:.0f} s wall. Machine: {m.get('nproc')} CPU ({m.get('cpu_model')}), kernel {m.get('kernel')}, "
             f"Redis {m.get('redis_server')}, PostgreSQL {m.get('postgres_server')}, {m.get('k6')}. "
             f"Load average at start {', '.join(f'{x:.2f}' for x in m.get('loadavg_start', []))}.")
    L.append("")
    L.append(f"Each mission cell: a fresh sale of {s['total']} units (per-user limit 2, 1-2 units per order), k6 open model at "
             f"{s['rate']} arrivals/s for {s['duration_s']} s over two instances (max {s['max_vus']} VUs). "
             "orders/s = orders committed / (time from the start of the load until the last order if the sale sold out, "
             "else the load duration). Latency: accepted (201) orders only, as k6 saw them.")
    if s.get("throughput_cells"):
        L.append("")
        L.append(f"Throughput cells ({', '.join(s['throughput_cells'])}): the same load, but a sale of {s['throughput_total']} units "
                 f"and {s['throughput_users']} user ids, so the stock outlasts the load (at most 2 units per arrival) and "
                 "orders/s is the steady-state rate over the whole load.")
    L.append("")
    L.append("Per-order costs: Redis `INFO stats` total_commands_processed and PostgreSQL `sum(xact_commit)` from "
             "`pg_stat_database` (read-only transactions included), server-wide deltas over the whole cell (k6 setup with the "
             "sale PUT, the load, the teardown audit; the runner's own probes add about 1 Redis command and 3 commits), "
             "divided by the orders committed.")
    L.append("")
    L.append("![orders/s and oversold per strategy](latest.svg)")
    L.append("")
    L.append("## Strategies")
    L.append("")
    if not res["strategies"]:
        L.append("Not run in this run" + (" (--only-locks)." if s.get("only_locks") else "."))
        L.append("")
    L.append("| strategy | shards | cell | orders/s | p50 ms | p99 ms | sold | oversold | stranded | duplicates | fence rej. | busy (503) | errors | sold out after s | Redis cmds / order | PG commits / order | k6 | check |")
    L.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for c in res["strategies"]:
        ok = "ok" if not c["violations"] else "**VIOLATION**"
        so = fmt(c["window_s"], 1) if c["sold_out_reached"] else f"not ({s['duration_s']} s)"
        L.append(f"| {c['strategy']} | {c['shards']} | {c.get('cell', 'mission')} | {fmt(c['orders_per_sec'])} | {fmt(c['p50_ms'], 1)} | {fmt(c['p99_ms'], 1)} | "
                 f"{fmt(c['sold'])} | {fmt(c['oversold'])} | {fmt(c['stranded'])} | {fmt(c['duplicates'])} | {fmt(c['fence_rejections'])} | "
                 f"{fmt(c['busy'])} | {fmt(c['errors'])} | {so} | {fmt(c.get('redis_cmds_per_order'), 3)} | {fmt(c.get('pg_commits_per_order'), 3)} | "
                 f"{c['k6_verdict']} ({c['k6_exit']}) | {ok} |")
    L.append("")
    profiled = [c for c in res["strategies"] if c.get("cpu_profile") and (c.get("cell") == "throughput" or c["shards"] == 20)]
    if profiled:
        cores = profiled[0]["cpu_profile"].get("cores", 0)
        L.append(f"Where the CPU went during each 20-shard and throughput cell (% of one core, over k6's run; the box has "
                 f"{cores} cores = {cores * 100}%): the service, PostgreSQL, the load generator and Redis share them.")
        L.append("")
        L.append("| strategy | cell | seckill (2 instances) | postgres | k6 | redis | other | busy |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|")
        for c in profiled:
            p_ = c["cpu_profile"]
            L.append(f"| {c['strategy']} | {c.get('cell', 'mission')} | {fmt(p_.get('seckill'))} | {fmt(p_.get('postgres'))} | "
                     f"{fmt(p_.get('k6'))} | {fmt(p_.get('redis'))} | {fmt(p_.get('other'))} | {fmt(p_.get('busy'))} |")
        L.append("")
    lock_rows = [c for c in res["strategies"] if (c.get("service_metrics") or {}).get("lock_acquired")]
    if lock_rows:
        L.append("Inside the lock-based strategies (the services' own metrics, both instances, during the cell):")
        L.append("")
        L.append("| strategy | shards | lock acquisitions | refused attempts per acquisition | mean wait for a lock ms | mean hold ms | probes given up | mean accepted order ms (server) |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for c in lock_rows:
            m = c["service_metrics"]
            per = m["lock_attempts_held"] / m["lock_acquired"] if m["lock_acquired"] else None
            tp_mark = " (throughput)" if c.get("cell") == "throughput" else ""
            L.append(f"| {c['strategy']} | {c['shards']}{tp_mark} | {fmt(m['lock_acquired'])} | {fmt(per, 1)} | {fmt(m['lock_wait_ms_avg'], 1)} | "
                     f"{fmt(m['lock_hold_ms_avg'], 1)} | {fmt(m['lock_wait_timeouts'])} | {fmt(m['order_ms_avg_accepted'], 1)} |")
        L.append("")
    L.append("## Ceilings (same run, same servers)")
    L.append("")
    pgc = res["ceilings"].get("pg", {})
    L.append("| ceiling | figure | how |")
    L.append("|---|---:|---|")
    hc = res["ceilings"].get("http") or {}
    if hc.get("error"):
        L.append(f"| HTTP ceiling | - | not measured: {hc['error'][:200]} |")
    elif hc:
        capped = " (no arrival dropped: capped by the offered rate, the real ceiling is higher)" if hc.get("capped_by_offered_rate") else ""
        L.append(f"| HTTP ceiling | {fmt(hc.get('http_ok_per_sec'))} req/s | k6, the cells' arrival model ({hc.get('rate')}/s for "
                 f"{hc.get('duration_s')} s, max {hc.get('max_vus')} VUs) against `GET /healthz` on both instances; "
                 f"{fmt(hc.get('dropped_iterations'))} arrivals dropped{capped}, p50 {fmt(hc.get('p50_ms'), 1)} ms, "
                 f"p99 {fmt(hc.get('p99_ms'), 1)} ms, {fmt(hc.get('unexpected'))} non-200 |")
    if pgc:
        L.append(f"| `pg_order_tps` | {fmt(pgc.get('pg_order_tps'))} tps | pgbench, {pgc.get('clients')} clients, {pgc.get('seconds')} s: "
                 f"`seckill_commit` (shard UPDATE + user upsert + orders + order_parts in one transaction); avg latency {pgc.get('latency_avg_ms')} ms |")
    for c, r in sorted(res["ceilings"].get("redis", {}).items(), key=lambda kv: int(kv[0])):
        L.append(f"| `redis_pairs_per_sec` C={c} | {fmt(r['pairs_per_sec'])} pairs/s | redis-benchmark -c {c}: SET NX PX {fmt(r['set_nx_px']['rps'])}/s, "
                 f"EVALSHA release {fmt(r['evalsha_release']['rps'])}/s; 1/(1/a+1/b) |")
    for c, r in sorted(res["ceilings"].get("redis_pipelined", {}).items(), key=lambda kv: int(kv[0])):
        L.append(f"| `redis_pairs_per_sec` C={c}, pipelined | {fmt(r['pairs_per_sec'])} pairs/s | redis-benchmark -c {c} -P {r.get('pipeline')}: "
                 f"SET NX PX {fmt(r['set_nx_px']['rps'])}/s, EVALSHA release {fmt(r['evalsha_release']['rps'])}/s; 1/(1/a+1/b) |")
    L.append("")
    lk = res["lockkit"]
    piped = lk.get("redis_pairs_pipelined") or {}
    L.append(f"## lockkit vs peers (pairs/s, p99 µs; {lk['duration_ms']} ms per run; one Redis)")
    L.append("")
    cols = [f"C={c}" for c in LOCK_CONCURRENCIES] + [f"contended C={CONTENDED_C}", f"Redis CPU µs/pair C={CONTENDED_C}"]
    L.append("| library | " + " | ".join(cols) + " |")
    L.append("|---|" + "---:|" * len(cols))

    def cell_of(r):
        if not r:
            return "-"
        if "error" in r:
            return "error"
        return f"{fmt(r.get('pairs_per_sec'))} (p99 {fmt(r.get('p99_us'))})"

    def by_mode(runs):
        return {(r.get("mode"), r.get("concurrency")): r for r in runs}

    def cpu_at(runs, c=CONTENDED_C):
        return fmt((by_mode(runs).get(("uncontended", c)) or {}).get("redis_cpu_us_per_pair"), 1)

    def row(name, runs):
        by_c = by_mode(runs)
        vals = [cell_of(by_c.get(("uncontended", c))) for c in LOCK_CONCURRENCIES]
        vals.append(cell_of(by_c.get(("contended", CONTENDED_C))))
        vals.append(cpu_at(runs))
        return f"| {name} | " + " | ".join(vals) + " |"

    L.append(row("**lockkit** (lockctl)", lk["lockctl"]))
    for lib in PEER_LIBRARIES:
        runs = [p for p in lk["peers"] if p.get("library") == lib]
        if runs:
            L.append(row(lib, runs))

    def raw_row(name, refs):
        vals = [fmt(refs.get(str(c), {}).get("pairs_per_sec")) for c in LOCK_CONCURRENCIES]
        return f"| {name} | " + " | ".join(vals) + f" | - | {fmt(refs.get(str(CONTENDED_C), {}).get('redis_cpu_us_per_pair'), 1)} |"

    def ratio_row(name, key):
        vals = [f"{lk['ratios'][str(c)][key] * 100:.0f}%" if lk["ratios"].get(str(c), {}).get(key) else "-"
                for c in LOCK_CONCURRENCIES]
        return f"| {name} | " + " | ".join(vals) + " | - | - |"

    L.append(raw_row("raw Redis pairs (redis-benchmark)", lk["redis_pairs"]))
    L.append(ratio_row("lockkit / raw Redis", "vs_redis"))
    if piped:
        L.append(raw_row(f"raw Redis pairs, pipelined (redis-benchmark -P {lk.get('pipeline', PIPELINE)})", piped))
        L.append(ratio_row("lockkit / raw Redis pipelined (informational)", "vs_redis_pipelined"))
    L.append("")
    L.append("Contended runs: polling peers barge (a releaser re-takes the lock while waiters sleep), which inflates "
             "their pairs/s; compare contended runs on p99 (see loadtest/peers/README.md).")
    L.append("")
    L.extend(backend_table(lk))
    L.append("## Targets")
    L.append("")
    L.append("| target | result | detail |")
    L.append("|---|---|---|")
    for t in res["targets"]:
        L.append(f"| {t['target']} | **{t['status']}** | {t['detail']} |")
    L.append("")
    if res["violations"]:
        L.append("## Correctness violations")
        L.append("")
        for v in res["violations"]:
            L.append(f"- {v}")
        L.append("")
    notes = []
    for c in res["strategies"]:
        if c["busy"]:
            notes.append(f"{cell_name(c)}: {c['busy']} busy (503) answers")
        if c.get("cell") == "throughput" and c["sold_out_reached"]:
            notes.append(f"{cell_name(c)}: the stock ran out during the load: orders/s is not a steady-state rate")
        if c["service_log"]["warn"] or c["service_log"]["error"]:
            notes.append(f"{cell_name(c)}: service log {c['service_log']['warn']} WARN, {c['service_log']['error']} ERROR lines")
    dropped = [c["dropped_iterations"] for c in res["strategies"]]
    if any(dropped):
        notes.append(f"k6 dropped {min(dropped)} to {max(dropped)} arrivals per cell: with {s['max_vus']} buyers in flight at most, "
                     "the rest of the demand was not sent (expected: demand is set well above what the service absorbs)")
    if notes:
        L.append("## Notes")
        L.append("")
        L.extend(f"- {n}" for n in notes)
        L.append("")
    L.append(f"Raw data: `{res['files']['json']}` (k6 summaries and service logs of this run under `{res['files']['run_dir']}`).")
    L.append("")
    return "\n".join(L)


def backend_table(lk: dict) -> list[str]:
    """Markdown: "lockkit by backend" (one Redis, Redlock, Cluster; the Redlock peers; the raw Redis refs)."""
    backends = lk.get("backends") or {}
    if not backends:
        return []
    L = [f"## lockkit by backend (pairs/s; {lk['duration_ms']} ms per run, same run)", ""]
    cols = [f"C={c}" for c in LOCK_CONCURRENCIES] + [f"contended C={CONTENDED_C}", f"p99 µs C={CONTENDED_C}",
                                                      f"Redis CPU µs/pair C={CONTENDED_C}"]
    L.append("| | " + " | ".join(cols) + " |")
    L.append("|---|" + "---:|" * len(cols))

    def row(name, runs, error=None):
        if error:
            return f"| {name} | not run: {error[:120]} |" + " |" * (len(cols) - 1)
        by_c = {(r.get("mode"), r.get("concurrency")): r for r in runs}

        def pps(r):
            return "-" if not r else "error" if "error" in r else fmt(r.get("pairs_per_sec"))
        vals = [pps(by_c.get(("uncontended", c))) for c in LOCK_CONCURRENCIES]
        vals.append(pps(by_c.get(("contended", CONTENDED_C))))
        mid = by_c.get(("uncontended", CONTENDED_C)) or {}
        vals += [fmt(mid.get("p99_us")), fmt(mid.get("redis_cpu_us_per_pair"), 1)]
        return f"| {name} | " + " | ".join(vals) + " |"

    for name, be in backends.items():
        label = "one Redis" if name == "redis" else be.get("label", name)
        L.append(row(f"**lockkit** {label}", be.get("runs", []), be.get("error")))
    for name, be in backends.items():
        if be.get("kind") != "redlock":
            continue
        for lib in REDLOCK_PEERS:
            runs = [p for p in be.get("peers", []) if p.get("library") == lib]
            if runs:
                L.append(row(f"{lib} {be.get('label', name)}", runs))
    for key, label in (("redis_pairs", "raw Redis pairs, one Redis (redis-benchmark)"),
                       ("redis_pairs_pipelined", f"raw Redis pairs, one Redis, pipelined (redis-benchmark -P {lk.get('pipeline', PIPELINE)})")):
        refs = lk.get(key) or {}
        if refs:
            vals = [fmt(refs.get(str(c), {}).get("pairs_per_sec")) for c in LOCK_CONCURRENCIES]
            L.append(f"| {label} | " + " | ".join(vals) + f" | - | - | {fmt(refs.get(str(CONTENDED_C), {}).get('redis_cpu_us_per_pair'), 1)} |")
    L.append("")
    nodes = "; ".join(f"{be.get('label', n)}: {', '.join(be.get('nodes', []))}" for n, be in backends.items())
    L.append(f"Servers: {nodes}. Redis CPU µs/pair: utime+stime of the backend's redis-server processes "
             "(`/proc/PID/stat`, summed over its nodes) during the run, divided by its pairs; for the raw Redis rows, "
             "the two redis-benchmark halves' CPU per request, added. p99 is the uncontended run's. "
             "Every node of a backend runs on the same 2 cores as the client.")
    L.append("")
    return L


def nice_ceiling(v: float) -> float:
    if v <= 0:
        return 1.0
    exp = 10 ** int(f"{v:e}".split("e")[1])
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * exp >= v:
            return m * exp
    return 10 * exp


def svg_chart(res: dict) -> str:
    cells = [c for c in res["strategies"] if c.get("cell", "mission") == "mission"]
    strategies = [s for s in STRATEGIES if any(c["strategy"] == s for c in cells)]
    by = {(c["strategy"], c["shards"]): c for c in cells}
    colors = {1: "#90b4dc", 20: "#2b6cb0"}
    over_colors = {1: "#f4a3a3", 20: "#c53030"}
    W, left, right = 960, 80, 30
    top1, h1 = 70, 300
    top2, h2 = top1 + h1 + 90, 170
    H = top2 + h2 + 70
    plot_w = W - left - right
    group_w = plot_w / max(1, len(strategies))
    bar_w = min(44, group_w / 3)
    tps = res["ceilings"].get("pg", {}).get("pg_order_tps")
    http_ok = (res["ceilings"].get("http") or {}).get("http_ok_per_sec")
    max_ops = max([c["orders_per_sec"] or 0 for c in cells] + [tps or 0, http_ok or 0, 1])
    y1max = nice_ceiling(max_ops * 1.08)
    max_over = max([c["oversold"] or 0 for c in cells] + [1])
    y2max = nice_ceiling(max_over * 1.1)
    e = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="Helvetica, Arial, sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="#ffffff"/>',
           f'<text x="{left}" y="28" font-size="17" font-weight="bold">Orders/s per stock strategy, 1 vs 20 shards</text>',
           f'<text x="{left}" y="48" fill="#555">{e(res["started_at"])} · commit {e(str(res["git"].get("short")))} · '
           f'{res["settings"]["total"]} units, {res["settings"]["rate"]} arrivals/s, 2 instances · '
           f'{e(str(res["machine"].get("nproc")))} CPU · mode {e(res["mode"])}</text>']

    def axis(top, h, ymax, label, fmt_tick):
        for i in range(6):
            v = ymax * i / 5
            y = top + h - h * i / 5
            out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{W - right}" y2="{y:.1f}" stroke="#e2e8f0"/>')
            out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end" fill="#444">{fmt_tick(v)}</text>')
        out.append(f'<line x1="{left}" y1="{top + h}" x2="{W - right}" y2="{top + h}" stroke="#333"/>')
        out.append(f'<text x="18" y="{top + h / 2:.1f}" transform="rotate(-90 18 {top + h / 2:.1f})" '
                   f'text-anchor="middle" fill="#333">{e(label)}</text>')

    def bars(top, h, ymax, value_of, palette):
        for gi, s in enumerate(strategies):
            gx = left + gi * group_w + group_w / 2
            for bi, sh in enumerate(SHARDS):
                c = by.get((s, sh))
                v = (value_of(c) or 0) if c else 0
                x = gx + (bi - 1) * bar_w - 2 + (bi * 4)
                bh = h * min(v, ymax) / ymax
                out.append(f'<rect x="{x:.1f}" y="{top + h - bh:.1f}" width="{bar_w:.1f}" height="{bh:.1f}" fill="{palette[sh]}">'
                           f'<title>{e(s)}, {sh} shard(s): {v:,.0f}</title></rect>')
                if c:
                    out.append(f'<text x="{x + bar_w / 2:.1f}" y="{top + h - bh - 4:.1f}" text-anchor="middle" font-size="11" '
                               f'fill="#222">{v:,.0f}</text>')
            out.append(f'<text x="{gx:.1f}" y="{top + h + 18}" text-anchor="middle" fill="#222">{e(s)}</text>')

    def k(v):
        return f"{v / 1000:.1f}k" if v >= 1000 else f"{v:.0f}"

    axis(top1, h1, y1max, "orders per second", k)
    bars(top1, h1, y1max, lambda c: c["orders_per_sec"], colors)
    if tps:
        y = top1 + h1 - h1 * min(tps, y1max) / y1max
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{W - right}" y2="{y:.1f}" stroke="#d69e2e" stroke-width="2" stroke-dasharray="6 4"/>')
        out.append(f'<text x="{W - right - 4}" y="{y - 6:.1f}" text-anchor="end" fill="#975a16">pgbench order ceiling {tps:,.0f} tps</text>')
        y60 = top1 + h1 - h1 * min(0.6 * tps, y1max) / y1max
        out.append(f'<line x1="{left}" y1="{y60:.1f}" x2="{W - right}" y2="{y60:.1f}" stroke="#d69e2e" stroke-width="1" stroke-dasharray="2 4"/>')
        out.append(f'<text x="{W - right - 4}" y="{y60 - 5:.1f}" text-anchor="end" fill="#975a16" font-size="11">60% of it (target)</text>')
    if http_ok:
        y = top1 + h1 - h1 * min(http_ok, y1max) / y1max
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{W - right}" y2="{y:.1f}" stroke="#38a169" stroke-width="2" stroke-dasharray="10 4"/>')
        out.append(f'<text x="{left + 4}" y="{y - 6:.1f}" fill="#276749">HTTP ceiling (GET /healthz) {http_ok:,.0f} req/s</text>')
    # legend
    lx = W - right - 190
    for sh in SHARDS:
        out.append(f'<rect x="{lx}" y="{top1 - 14}" width="12" height="12" fill="{colors[sh]}"/>')
        out.append(f'<text x="{lx + 17}" y="{top1 - 4}">{sh} shard{"s" if sh > 1 else ""}</text>')
        lx += 95
    out.append(f'<text x="{left}" y="{top2 - 30}" font-size="15" font-weight="bold">Oversold units (audit) — must be 0 for all but none</text>')
    axis(top2, h2, y2max, "oversold units", lambda v: f"{v:.0f}")
    bars(top2, h2, y2max, lambda c: c["oversold"], over_colors)
    lx = W - right - 190
    for sh in SHARDS:
        out.append(f'<rect x="{lx}" y="{top2 - 42}" width="12" height="12" fill="{over_colors[sh]}"/>')
        out.append(f'<text x="{lx + 17}" y="{top2 - 32}">{sh} shard{"s" if sh > 1 else ""}</text>')
        lx += 95
    out.append(f'<text x="{left}" y="{H - 18}" fill="#666" font-size="11">orders/s = committed orders / time from load start to the last order '
               '(sell-out) or to the end of the load; see loadtest/README.md</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------
# main


def parse_args(argv):
    p = argparse.ArgumentParser(description="seckill comparison runner (make bench); see loadtest/README.md")
    p.add_argument("--smoke", action="store_true", help="short CI run: correctness only, writes loadtest/results/smoke-latest.json")
    p.add_argument("--strategies", default=None,
                   help="comma-separated subset (default: all; smoke: all but owned-unfenced)")
    p.add_argument("--throughput", default=None,
                   help="throughput cells as strategy/shards, comma-separated, '' for none "
                        f"(default: {THROUGHPUT_CELLS}; smoke: none)")
    p.add_argument("--shards", default=",".join(map(str, SHARDS)), help="comma-separated shard counts (default: 1,20)")
    p.add_argument("--total", type=int, help="stock per cell (full 10000, smoke 300)")
    p.add_argument("--rate", type=int, help="k6 arrivals/s (full 4000, smoke 200)")
    p.add_argument("--duration", type=int, dest="duration_s", help="k6 load seconds per cell (full 20, smoke 3)")
    p.add_argument("--max-vus", type=int, help="k6 VU ceiling (full 300, smoke 150)")
    p.add_argument("--pg-seconds", type=int, help="pgbench duration (full 10, smoke 2)")
    p.add_argument("--lock-ms", type=int, help="lockctl / peer run length in ms (full 3000, smoke 500)")
    p.add_argument("--no-peers", action="store_true", help="skip the peer lock libraries")
    p.add_argument("--no-ceilings", action="store_true", help="strategy matrix only: skip pgbench, redis-benchmark, lockkit and peers")
    p.add_argument("--only-locks", action="store_true",
                   help="lockkit section only: the raw Redis pair references, lockctl on every backend and the peers "
                        "(no seckill instances, no strategy matrix, no HTTP/pgbench ceilings)")
    p.add_argument("--redlock-url", default=os.environ.get(REDLOCK_URL_ENV, ""),
                   help=f"Redlock backend for lockctl and the Redlock peers, redlock://h:p,... (default ${REDLOCK_URL_ENV}; "
                        "'' skips it; scripts/lock-servers.sh env prints it)")
    p.add_argument("--cluster-url", default=os.environ.get(CLUSTER_URL_ENV, ""),
                   help=f"Redis Cluster backend for lockctl, redis+cluster://h:p,... (default ${CLUSTER_URL_ENV}; '' skips it)")
    p.add_argument("--results-dir", type=Path, default=RESULTS, help="where result files go (default loadtest/results)")
    p.add_argument("--keep-sales", action="store_true", help="keep the bench sales (orders) in PostgreSQL afterwards")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    mode = "smoke" if args.smoke else "full"
    cfg = {k: (dict(v) if isinstance(v, dict) else v) for k, v in PRESETS[mode].items()}
    for key in ("total", "rate", "duration_s", "max_vus", "pg_seconds", "lock_ms"):
        if getattr(args, key, None) is not None:
            cfg[key] = getattr(args, key)
    if args.no_peers:
        cfg["peers"] = False
    if args.only_locks and args.no_ceilings:
        log("--only-locks and --no-ceilings exclude each other")
        return 2
    if args.strategies is None:
        args.strategies = ",".join(SMOKE_STRATEGIES if args.smoke else STRATEGIES)
    if args.throughput is None:
        args.throughput = "" if args.smoke else THROUGHPUT_CELLS
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    throughput = []
    for item in (x.strip() for x in args.throughput.split(",") if x.strip()):
        name, _, sh = item.partition("/")
        if not sh.isdigit() or int(sh) < 1:
            log(f"--throughput: {item!r} is not strategy/shards")
            return 2
        throughput.append((name, int(sh)))
    unknown = [s for s in strategies + [t[0] for t in throughput] if s not in STRATEGIES]
    if unknown:
        log(f"unknown strategies: {unknown}")
        return 2
    shard_list = [int(x) for x in args.shards.split(",") if x.strip()]
    # Throughput cells: no arrival buys more than 2 units, so this stock cannot run out during the
    # load (and lasts well over 15 s at the offered rate).
    tp_cfg = dict(cfg, total=cfg["rate"] * cfg["duration_s"] * 2, users=THROUGHPUT_USERS)

    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6390")
    database_url = os.environ.get("DATABASE_URL", "postgres://seckill@127.0.0.1:5440/seckill")
    try:
        loopback_only(redis_url, "REDIS_URL")
        loopback_only(database_url, "DATABASE_URL")
        backends = [LockBackend("redis", "one Redis", redis_url)]
        for kind, label, url, what in (("redlock", "Redlock", args.redlock_url, "--redlock-url"),
                                       ("cluster", "Cluster", args.cluster_url, "--cluster-url")):
            if not url or args.no_ceilings:
                continue
            be = LockBackend("", label, url)
            if be.kind != kind:
                raise SetupError(f"{what} must be a {kind} URL (got a {be.kind} one)")
            for node in be.node_urls:
                loopback_only(node, what)
            be.name = f"{kind}-{len(be.nodes)}"
            be.label = f"Redlock {len(be.nodes)} nodes" if kind == "redlock" else f"Cluster {len(be.nodes)} masters"
            backends.append(be)
        for binary in ((LOCKCTL_BIN,) if args.only_locks else (SECKILL_BIN, LOCKCTL_BIN)):
            if not os.access(binary, os.X_OK):
                raise SetupError(f"{binary} missing: run scripts/bench.sh (it builds the release binaries)")
        for tool in ("psql", "pgbench", "redis-cli", "redis-benchmark"):
            if not shutil.which(tool):
                raise SetupError(f"{tool} not found on PATH")
    except SetupError as e:
        log(f"ERROR: {e}")
        return 2

    started = utc_now()
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    run_id = f"{started.strftime('%H%M%S')}{secrets.token_hex(2)}"
    run_dir = RUN_BASE / f"{stamp}-{mode}"
    run_dir.mkdir(parents=True, exist_ok=True)
    results = args.results_dir.resolve()
    results.mkdir(parents=True, exist_ok=True)
    pg, redis = Pg(database_url), Redis(redis_url)

    # SIGTERM/SIGINT -> exception, so `finally` stops the instances.
    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    t_start = time.monotonic()
    res: dict = {
        "schema": 1, "mode": mode, "started_at": started.isoformat(timespec="seconds"), "run_id": run_id,
        "git": git_info(), "machine": machine_info(pg, redis),
        "settings": {**{k: v for k, v in cfg.items() if k not in ("redis_n", "redis_n_pipelined")}, "redis_requests": cfg["redis_n"],
                     "strategies": strategies, "shards": shard_list, "per_user_limit": 2, "max_per_order": 2,
                     "qty_mix": "1:0.7,2:0.3", "replay_fraction": 0.05, "invalid_fraction": 0.02,
                     "instances": 2, "request_deadline_ms": 2000,
                     "throughput_cells": [f"{n}/{sh}" for n, sh in throughput],
                     "throughput_total": tp_cfg["total"], "throughput_users": tp_cfg["users"],
                     "only_locks": args.only_locks, "redis_requests_pipelined": cfg["redis_n_pipelined"],
                     "pipeline": PIPELINE, "lock_backends": [be.name for be in backends]},
        "files": {"run_dir": str(run_dir.relative_to(ROOT))},
        "ceilings": {},
    }
    log(f"mode {mode}, run {run_id}, working files in {run_dir.relative_to(ROOT)}")

    instances: list[Instance] = []
    cells: list[dict] = []
    violations: list[str] = []
    rc = 0
    try:
        # --- 1. strategy matrix -------------------------------------------------------------
        if args.only_locks:
            log("--only-locks: no seckill instances, no strategy matrix")
        else:
            token = secrets.token_urlsafe(24)
            env = dict(os.environ)
            env.update({"SECKILL_LISTEN": "127.0.0.1:0", "REDIS_URL": redis_url, "DATABASE_URL": database_url,
                        "SECKILL_ADMIN_TOKEN": token, "NO_COLOR": "1", "RUST_LOG": os.environ.get("BENCH_RUST_LOG", "info")})
            for i in (1, 2):
                instances.append(Instance(i, run_dir, env))
                # one at a time: they serialise on the migration lock anyway
                instances[-1].wait_ready()
            # HTTP ceiling first, on the same instances, with the cells' arrival model.
            if not args.no_ceilings:
                log(f"HTTP ceiling: GET /healthz, {cfg['rate']}/s for {cfg['duration_s']} s")
                try:
                    res["ceilings"]["http"] = hc = http_ceiling(cfg, instances, run_dir)
                    log(f"    {hc['http_ok_per_sec']:.0f} req/s, dropped {hc['dropped_iterations']}, non-200 {hc['unexpected']}")
                except SetupError as e:  # a ceiling that could not be measured is reported, not fatal
                    log(f"HTTP ceiling not measured: {e}")
                    res["ceilings"]["http"] = {"error": str(e)}
            plan = [(s_, sh, "mission", cfg) for s_ in strategies for sh in shard_list]
            plan += [(s_, sh, "throughput", tp_cfg) for s_, sh in throughput]
            for n, (strategy, shards, kind, ccfg) in enumerate(plan, 1):
                log(f"[{n}/{len(plan)}] {strategy}, {shards} shard(s), {kind}: {ccfg['total']} units, {ccfg['rate']}/s for {ccfg['duration_s']} s")
                cell = run_cell(args, ccfg, pg, redis, instances, token, run_id, run_dir, strategy, shards, kind)
                cells.append(cell)
                log(f"    {cell['orders_per_sec']:.0f} orders/s, p50 {cell['p50_ms']} ms, p99 {cell['p99_ms']} ms, sold {cell['sold']}, "
                    f"oversold {cell['oversold']}, stranded {cell['stranded']}, busy {cell['busy']}, errors {cell['errors']}, "
                    f"Redis cmds/order {cell['redis_cmds_per_order']}, PG commits/order {cell['pg_commits_per_order']}, "
                    f"k6 exit {cell['k6_exit']}" + ("" if not cell["violations"] else f"  VIOLATION: {'; '.join(cell['violations'])}"))
                violations.extend(cell["violations"])
                for inst in instances:
                    if inst.proc.poll() is not None:
                        raise SetupError(f"seckill #{inst.idx} died (exit {inst.proc.returncode}); see {inst.log_path}")
        res["strategies"] = cells
    except (SetupError, KeyboardInterrupt) as e:
        log(f"ERROR: {e}")
        violations.append(f"run aborted: {e}")
        res["strategies"] = cells
        rc = 2
    finally:
        res["service_logs"] = {}
        for inst in instances:
            code = inst.stop()
            res["service_logs"][f"seckill-{inst.idx}"] = {"log": str(inst.log_path.relative_to(ROOT)), "exit": code,
                                                         **log_findings(inst.log_text())}
            log(f"seckill #{inst.idx} stopped (exit {code})")

    # --- 2. ceilings and 3. lockkit (instances stopped: they would only steal CPU) -------------
    res["lockkit"] = {"lockctl": [], "peers": [], "backends": {}, "redis_pairs": {}, "redis_pairs_pipelined": {},
                      "ratios": {}, "duration_ms": cfg["lock_ms"]}
    if rc == 0 and not args.no_ceilings:
        try:
            if not args.only_locks:
                log(f"pgbench ceiling: {cfg['pg_clients']} clients, {cfg['pg_seconds']} s")
                res["ceilings"]["pg"] = pgbench_ceiling(pg, run_id, run_dir, cfg["pg_seconds"], cfg["pg_clients"])
                log(f"    pg_order_tps {res['ceilings']['pg']['pg_order_tps']}")
            for be in backends:
                try:
                    be.check()
                except SetupError as e:  # reported in the backend's entry and as a violation below
                    be.error = str(e)
                    log(f"ERROR: {e}")
            if backends[0].error:
                raise SetupError(backends[0].error)
            redis_pids = backends[0].pids
            redis_by_c, piped_by_c = {}, {}
            for c in ((50,) if not args.only_locks else ()) + tuple(LOCK_CONCURRENCIES):
                log(f"redis-benchmark pairs at C={c} ({cfg['redis_n'][c]} requests each)")
                redis_by_c[c] = redis_pairs(redis, run_id, c, cfg["redis_n"][c], pids=redis_pids)
                log(f"    {redis_by_c[c]['pairs_per_sec']:.0f} pairs/s, Redis CPU {redis_by_c[c]['redis_cpu_us_per_pair']} us/pair")
            for c in LOCK_CONCURRENCIES:
                n = cfg["redis_n_pipelined"][c]
                log(f"redis-benchmark pairs at C={c}, pipelined -P {PIPELINE} ({n} requests each)")
                piped_by_c[c] = redis_pairs(redis, run_id, c, n, PIPELINE, redis_pids)
                log(f"    {piped_by_c[c]['pairs_per_sec']:.0f} pairs/s, Redis CPU {piped_by_c[c]['redis_cpu_us_per_pair']} us/pair")
            # Their keys (30 s TTL) would otherwise expire inside the lock runs that follow.
            n_keys = unlink_pattern(redis, f"benchlock:{run_id}:*")
            log(f"    unlinked the {n_keys} keys the redis-benchmark runs left")
            res["ceilings"]["redis"] = {str(c): v for c, v in redis_by_c.items()}
            res["ceilings"]["redis_pipelined"] = {str(c): v for c, v in piped_by_c.items()}
            if 50 in redis_by_c:
                res["ceilings"]["redis_pairs_per_sec"] = redis_by_c[50]["pairs_per_sec"]
            if res["ceilings"].get("pg"):
                res["ceilings"]["pg_order_tps"] = res["ceilings"]["pg"]["pg_order_tps"]
            if res["ceilings"].get("http"):
                res["ceilings"]["http_ok_per_sec"] = res["ceilings"]["http"]["http_ok_per_sec"]
            res["lockkit"] = lockkit_section(redis, cfg, run_id, {c: redis_by_c[c] for c in LOCK_CONCURRENCIES}, backends,
                                             piped_by_c)
            for name, be in res["lockkit"]["backends"].items():
                if be.get("error"):
                    violations.append(f"lockctl bench on {be['label']} not run: {be['error']}")
                for r in be["runs"]:
                    if "error" in r:
                        where = "" if name == "redis" else f" on {be['label']}"
                        violations.append(f"lockctl bench{where} C={r['concurrency']} {r['mode']} failed: {r['error']}")
                if be.get("peers_exit"):
                    log(f"peer harnesses on {be['label']}: run.sh exited {be['peers_exit']} (failed runs are marked 'error')")
        except (SetupError, KeyboardInterrupt) as e:
            log(f"ERROR: {e}")
            violations.append(f"ceilings/lockkit aborted: {e}")
            rc = 2

    if not args.keep_sales and not violations:
        try:
            pg.query(f"DELETE FROM sales WHERE sku LIKE 'bench-{run_id}-%'", timeout=300)
            # The service's Redis keys of those sales (stock hints, shard-lock fence counters).
            keys = [k for k in redis.cli("--scan", "--pattern", f"*bench-{run_id}-*", timeout=60).splitlines() if k]
            for i in range(0, len(keys), 200):
                redis.cli("UNLINK", *keys[i:i + 200])
        except SetupError as e:
            log(f"could not delete the bench sales: {e}")
    elif violations:
        res["kept_sales"] = f"bench-{run_id}-*"
        log(f"violations: the sales bench-{run_id}-* stay in PostgreSQL for inspection")

    res["machine"]["loadavg_end"] = list(os.getloadavg())
    res["finished_at"] = utc_now().isoformat(timespec="seconds")
    res["duration_s"] = round(time.monotonic() - t_start, 1)
    res["targets"] = evaluate_targets(cells, res["ceilings"], res["lockkit"], args.smoke)
    res["violations"] = violations
    res["ok"] = not violations

    def rel(name: str) -> str:
        path = results / name
        return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)

    if args.smoke:
        res["files"]["json"] = rel("smoke-latest.json")
        (results / "smoke-latest.json").write_text(json.dumps(res, indent=2) + "\n")
    else:
        res["files"].update({"json": rel(f"{stamp}.json"), "latest": rel("latest.json"),
                             "markdown": rel("latest.md"), "svg": rel("latest.svg")})
        text = json.dumps(res, indent=2) + "\n"
        (results / f"{stamp}.json").write_text(text)
        if rc == 0:
            (results / "latest.json").write_text(text)
            (results / "latest.md").write_text(markdown(res))
            (results / "latest.svg").write_text(svg_chart(res))
        else:  # an aborted run does not replace the latest complete one
            for key in ("latest", "markdown", "svg"):
                res["files"].pop(key, None)
            log("run aborted: latest.* left as they were")

    # console summary
    print()
    print(f"seckill bench ({mode}) {res['started_at']}  {res['duration_s']:.0f} s")
    print(f"{'strategy':16} {'shards':>6} {'cell':>4} {'orders/s':>9} {'p50ms':>7} {'p99ms':>8} {'sold':>7} {'over':>5} {'strand':>6} {'dup':>4} "
          f"{'busy':>6} {'err':>4} {'redis/o':>7} {'pg/o':>6}  k6")
    for c in cells:
        print(f"{c['strategy']:16} {c['shards']:>6} {'tp' if c.get('cell') == 'throughput' else 'm':>4} {c['orders_per_sec']:>9.0f} "
              f"{fmt(c['p50_ms'], 1):>7} {fmt(c['p99_ms'], 1):>8} "
              f"{fmt(c['sold']):>7} {fmt(c['oversold']):>5} {fmt(c['stranded']):>6} {fmt(c['duplicates']):>4} {c['busy']:>6} {c['errors']:>4} "
              f"{fmt(c.get('redis_cmds_per_order'), 3):>7} {fmt(c.get('pg_commits_per_order'), 3):>6}  "
              f"{c['k6_verdict']}({c['k6_exit']})")
    if res["ceilings"]:
        print(f"http_ok_per_sec {(res['ceilings'].get('http') or {}).get('http_ok_per_sec')}, "
              f"pg_order_tps {res['ceilings'].get('pg_order_tps')}, redis_pairs_per_sec (C=50) {res['ceilings'].get('redis_pairs_per_sec')}")
    if res["lockkit"].get("backends"):
        print(f"lockctl/peers pairs/s at C={', '.join(map(str, LOCK_CONCURRENCIES))}, contended C={CONTENDED_C}; "
              f"Redis CPU us/pair at C={CONTENDED_C}:")
        lk = res["lockkit"]

        def summary(runs):
            by_c = {(r.get("mode"), r.get("concurrency")): r for r in runs}
            keys = [("uncontended", c) for c in LOCK_CONCURRENCIES] + [("contended", CONTENDED_C)]
            vals = ["err" if "error" in by_c.get(k, {}) else fmt(by_c.get(k, {}).get("pairs_per_sec")) for k in keys]
            cpu = by_c.get(("uncontended", CONTENDED_C), {}).get("redis_cpu_us_per_pair")
            return " / ".join(vals) + f"; cpu {fmt(cpu, 1)}"
        for name, be in lk["backends"].items():
            print(f"  lockctl {name:12} " + (f"not run: {be['error']}" if be.get("error") else summary(be["runs"])))
            for lib in sorted({p_.get("library") for p_ in be.get("peers", [])}):
                print(f"  {lib:20} on {name:10} " + summary([p_ for p_ in be["peers"] if p_.get("library") == lib]))
        for key in ("redis_pairs", "redis_pairs_pipelined"):
            refs = lk.get(key) or {}
            if refs:
                print(f"  {key:34} " + " / ".join(fmt(refs.get(str(c), {}).get("pairs_per_sec")) for c in LOCK_CONCURRENCIES)
                      + f"; cpu {fmt(refs.get(str(CONTENDED_C), {}).get('redis_cpu_us_per_pair'), 1)}")
    if not args.smoke:
        for t in res["targets"]:
            print(f"  {t['status']:4}  {t['target']}: {t['detail']}")
    print(f"results: {res['files']['json']}")
    if violations:
        print("VIOLATIONS:")
        for v in violations:
            print(f"  - {v}")
        return rc or 1
    print("all correctness checks held")
    return rc


if __name__ == "__main__":
    sys.exit(main())
