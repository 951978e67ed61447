"""One cell of the comparison: a fresh sale of one strategy and shard count under k6's open-model
load against both instances, then what happened to it, from PostgreSQL and the service's audit,
and whether it was correct.

A cell is a `mission` (a sale that sells out), a `throughput` cell (stock that outlasts the load)
or a `latency` point (a fraction of the strategy's throughput offered, with VUs to spare). The
spec says what to run (`CellSpec`), the result what came out (`CellResult`); `check_cell` is the
pure correctness check of a result.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import cpu
from .processes import (Instance, http_json, k6_metric, log_findings, metrics_delta, read_json, rel,
                        run_k6, scrape_metrics)
from .settings import K6_SCRIPT, NONE_ALLOWED_FAILURES, PG_STATS_SETTLE_S, payment_window_ms
from .stores import Pg, Redis, pg_total_commits, redis_total_commands

KINDS = ("mission", "throughput", "latency")


@dataclass(frozen=True)
class CellSpec:
    """What one cell runs."""

    strategy: str
    shards: int
    kind: str  # one of KINDS
    total: int
    users: int
    rate: int  # arrivals per second offered
    duration_s: int
    vus_limit: int  # k6 maxVUs: arrivals beyond this many buyers in flight are dropped
    pre_vus: int
    fraction: float | None = None  # latency points: share of the throughput cell's orders/s
    round_no: int = 0  # a target point's round (1, 2, ...) when it runs in rounds, else 0

    @property
    def suffix(self) -> str:
        if self.kind == "throughput":
            return "-tp"
        if self.kind == "latency":
            return f"-at{self.rate}" + (f"-r{self.round_no}" if self.round_no else "")
        return ""

    @property
    def label(self) -> str:
        base = f"{self.strategy}/{self.shards}"
        if self.kind == "latency":
            run = f", round {self.round_no}" if self.round_no else ""
            return f"{base} (latency, {round((self.fraction or 0) * 100)}%{run})"
        return base + (" (throughput)" if self.kind == "throughput" else "")

    def sku(self, run_id: str) -> str:
        return f"bench-{run_id}-{self.strategy}-{self.shards}{self.suffix}"


@dataclass
class CellResult:
    """What one cell measured. Counts come from PostgreSQL, the audit and k6's summary."""

    spec: CellSpec
    sku: str = ""
    k6_exit: int = -1
    k6_verdict: str = "missing"
    k6_wall_s: float = 0.0
    k6_summary: str = ""
    k6_log: str = ""
    failed_thresholds: list[str] = field(default_factory=list)
    k6_notes: list[str] = field(default_factory=list)
    audit: dict | None = None
    audit_error: str | None = None
    orders_per_sec: float = 0.0
    units_per_sec: float = 0.0
    window_s: float | None = None
    sold_out_reached: bool = False
    sold_95pct_after_s: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    orders: int = 0
    sold: int | None = None
    remaining: int | None = None
    oversold: int | None = None
    stranded: int | None = None
    consistent: bool | None = None
    users_over_limit: int | None = None
    fence_rejections: int | None = None
    busy: int = 0
    errors: int = 0
    server_errors: int = 0
    accepted: int = 0
    units_accepted: int = 0
    replayed: int = 0
    sold_out_answers: int = 0
    user_limit: int = 0
    invalid_rejected: int = 0
    requests: int = 0
    dropped_iterations: int = 0
    max_vus: int = 0  # the most VUs k6 had at once
    # Orders the clients were told were taken (201 answers, by Idempotency-Key, from k6's log)
    # and how many of those the orders table lacks: the audit cannot see a lost acknowledgement.
    acked: int | None = None
    acked_missing: int | None = None
    acked_missing_sample: list[str] = field(default_factory=list)
    redis_commands: int | None = None
    pg_commits: int | None = None
    redis_cmds_per_order: float | None = None
    pg_commits_per_order: float | None = None
    cpu_profile: dict = field(default_factory=dict)
    service_metrics: dict = field(default_factory=dict)
    service_log: dict = field(default_factory=lambda: {"warn": 0, "error": 0, "samples": []})
    unexpected_reasons: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    # Latency points only: why the point cannot be quoted (latency.point_flag), None when it can.
    not_valid: str | None = None

    @property
    def strategy(self) -> str:
        return self.spec.strategy

    @property
    def shards(self) -> int:
        return self.spec.shards

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def name(self) -> str:
        return self.spec.label

    def to_json(self) -> dict:
        """The spec's fields and the results side by side (`cell` is the kind, as before)."""
        out = asdict(self)
        spec = out.pop("spec")
        return {"strategy": spec.pop("strategy"), "shards": spec.pop("shards"), "cell": spec.pop("kind"), **spec, **out}


@dataclass
class CellContext:
    """What every cell of one run shares: servers, instances, the admin token, where files go."""

    pg: Pg
    redis: Redis
    instances: list[Instance]
    token: str
    run_id: str
    run_dir: Path


# console.log(`ack <Idempotency-Key> <order_id>`) of loadtest/k6/lib/seckill.js with LOG_ACKS=1.
_ACK = re.compile(r"\back (k6-\S+) (-?\d+)")
_UNEXPECTED = re.compile(r"unexpected answer \(([^)]*)\)")


def parse_acks(console_text: str) -> dict[str, str]:
    """Idempotency-Key -> order_id of every order k6 saw acknowledged (201)."""
    return {m.group(1): m.group(2) for m in _ACK.finditer(console_text)}


def unexpected_reasons(*texts: str) -> list[str]:
    return sorted({r for t in texts for r in _UNEXPECTED.findall(t)})[:10]


def sale_window(load_start: float | None, last_at: float | None, sold_out: bool, duration_s: float) -> float | None:
    """Seconds from the start of the load to the last order if the sale sold out, else to the end
    of the load; None without orders."""
    if load_start is None or last_at is None:
        return None
    end = last_at if sold_out else load_start + duration_s
    return max(end - load_start, 1e-3)


def iso_to_epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def per_order(delta: int | None, orders: int) -> float | None:
    return None if delta is None or orders <= 0 else round(delta / orders, 4)


def round_or_none(v, nd: int = 1) -> float | None:
    return None if v is None else round(float(v), nd)


def k6_env(ctx: CellContext, spec: CellSpec, summary_path: Path) -> dict[str, str]:
    """The k6 scenario's settings for this cell; the load model (per-user limit, quantity mix,
    replays, invalid requests) is the k6 library's default. An owned sale gets the bench's payment
    window."""
    window = payment_window_ms(spec.strategy)
    owned = {} if window is None else {"PAYMENT_WINDOW_MS": str(window)}
    return {
        "TARGETS": ",".join(i.base for i in ctx.instances),
        "SKU": spec.sku(ctx.run_id),
        "PROFILE": "constant",
        "RATE": str(spec.rate),
        "DURATION": f"{spec.duration_s}s",
        "USERS": str(spec.users),
        "SETUP_SALE": "1",
        "ADMIN_TOKEN": ctx.token,
        "TOTAL": str(spec.total),
        "SHARDS": str(spec.shards),
        "STRATEGY": spec.strategy,
        "MAX_VUS": str(spec.vus_limit),
        "PRE_VUS": str(spec.pre_vus),
        "SUMMARY_PATH": str(summary_path),
        "LOG_UNEXPECTED": "2",
        "LOG_ACKS": "1",
        **owned,
    }


def run_cell(ctx: CellContext, spec: CellSpec) -> CellResult:
    """Runs one cell and reads back everything about it (see docs/bench.md)."""
    stem = f"k6-{spec.strategy}-{spec.shards}{spec.suffix}"
    summary_path, k6_log, console = (ctx.run_dir / f"{stem}{ext}" for ext in (".json", ".log", ".console.log"))
    cell = CellResult(spec=spec, sku=spec.sku(ctx.run_id), k6_summary=rel(summary_path), k6_log=rel(k6_log))
    log_offsets = [i.log_size() for i in ctx.instances]
    metrics_before = scrape_metrics(ctx.instances)
    # Per-order costs: server-wide counters around the whole cell (k6 setup with the sale PUT,
    # the load, k6 teardown with the audit).
    redis_before, pg_before = redis_total_commands(ctx.redis), pg_total_commits(ctx.pg)
    cpu_before, k6_cpu_before = cpu.process_ticks(), cpu.children_cpu_s()
    t0 = time.monotonic()
    cell.k6_exit = run_k6(K6_SCRIPT, k6_env(ctx, spec, summary_path), k6_log,
                          timeout=spec.duration_s + 150,  # load + gracefulStop 10 s + setup/teardown bounds
                          console_path=console)
    wall = time.monotonic() - t0
    # k6 (and its wrapper) ended before the second sample; its CPU went to this process's children.
    cell.cpu_profile = cpu.cpu_profile(cpu_before, cpu.process_ticks(), wall, cpu.children_cpu_s() - k6_cpu_before)
    cell.k6_wall_s = round(wall, 1)
    if spec.kind != "latency":  # latency points report no per-order costs
        time.sleep(PG_STATS_SETTLE_S)
    redis_after, pg_after = redis_total_commands(ctx.redis), pg_total_commits(ctx.pg)
    cell.service_metrics = metrics_delta(metrics_before, scrape_metrics(ctx.instances))

    summary = read_json(summary_path)
    read_k6_summary(cell, summary)
    read_audit(cell, ctx.instances[-1])
    read_orders(cell, ctx.pg, summary)
    redis_cmds = None if redis_after is None or redis_before is None else redis_after - redis_before
    pg_commits = None if pg_after is None or pg_before is None else pg_after - pg_before
    cell.redis_commands, cell.pg_commits = redis_cmds, pg_commits
    cell.redis_cmds_per_order = per_order(redis_cmds, cell.orders)
    cell.pg_commits_per_order = per_order(pg_commits, cell.orders)

    console_text = _read(console)
    acks = parse_acks(console_text)
    missing = missing_acks(ctx.pg, cell.sku, list(acks))
    cell.acked, cell.acked_missing, cell.acked_missing_sample = len(acks), len(missing), missing[:5]
    cell.unexpected_reasons = unexpected_reasons(console_text, _read(k6_log))
    findings = [log_findings(inst.log_since(off), limit=4) for inst, off in zip(ctx.instances, log_offsets, strict=True)]
    cell.service_log = {"warn": sum(f["warn"] for f in findings), "error": sum(f["error"] for f in findings),
                        "samples": [s for f in findings for s in f["samples"]][:6]}
    cell.violations = check_cell(cell)
    return cell


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def read_k6_summary(cell: CellResult, summary: dict) -> None:
    sk = summary.get("seckill", {})
    outcomes = sk.get("outcomes", {})

    def n(key: str) -> int:
        return int(outcomes.get(key, 0) or 0)

    cell.k6_verdict = sk.get("verdict", "missing")
    cell.failed_thresholds = sorted({t.get("metric", "?") for t in sk.get("failed_thresholds", [])})
    cell.k6_notes = sk.get("notes", [])
    cell.busy, cell.errors, cell.server_errors = n("busy"), n("unexpected"), n("server_errors")
    cell.accepted, cell.units_accepted, cell.replayed = n("orders_accepted"), n("units_accepted"), n("orders_replayed")
    cell.sold_out_answers, cell.user_limit, cell.invalid_rejected = n("sold_out"), n("user_limit"), n("invalid_rejected")
    cell.sold_out_reached = cell.sold_out_answers > 0
    cell.p50_ms = round_or_none(k6_metric(summary, "order_latency", "med", None), 2)
    cell.p90_ms = round_or_none(k6_metric(summary, "order_latency", "p(90)", None), 2)
    cell.p99_ms = round_or_none(k6_metric(summary, "order_latency", "p(99)", None), 2)
    cell.requests = int(k6_metric(summary, "http_reqs", "count", 0) or 0)
    cell.dropped_iterations = int(k6_metric(summary, "dropped_iterations", "count", 0) or 0)
    cell.max_vus = int(k6_metric(summary, "vus_max", "max", 0) or 0)


def fetch_audit(instance: Instance, sku: str) -> tuple[dict | None, str | None]:
    """(the sale's audit, None) or (None, why it could not be read)."""
    try:
        status, body = http_json("GET", f"{instance.base}/v1/sales/{sku}/audit", timeout=30)
    except OSError as e:
        return None, str(e)
    if status != 200 or not isinstance(body, dict):
        return None, f"status {status}: {str(body)[:200]}"
    return body, None


def read_audit(cell: CellResult, instance: Instance) -> None:
    """The audit, read again here from the *second* instance (k6 read it from the first)."""
    cell.audit, cell.audit_error = fetch_audit(instance, cell.sku)
    if cell.audit is None:
        return
    body = cell.audit
    for name in ("sold", "remaining", "oversold", "stranded", "consistent", "users_over_limit", "fence_rejections"):
        setattr(cell, name, body.get(name))


def read_orders(cell: CellResult, pg: Pg, summary: dict) -> None:
    """Orders/s from the server's commit times (see orders_per_sec in docs/bench.md)."""
    row = pg.rows("SELECT count(*), COALESCE(sum(quantity), 0), extract(epoch FROM min(created_at)), "
                  "extract(epoch FROM max(created_at)) FROM orders WHERE sku = %s", (cell.sku,))[0]
    cell.orders, units = int(row[0]), int(row[1])
    first_at, last_at = (None if v is None else float(v) for v in row[2:4])
    if cell.sold is None:
        cell.sold = units
    load_start = iso_to_epoch((summary.get("setup_data") or {}).get("startedAt")) or first_at
    # When 95% of the stock had been sold: shows a slow tail (the last units scattered over shards).
    t95 = pg.value("SELECT extract(epoch FROM min(created_at)) FROM (SELECT created_at, "
                   "sum(quantity) OVER (ORDER BY created_at, id) AS cum FROM orders WHERE sku = %s) o "
                   "WHERE cum >= 0.95 * %s", (cell.sku, cell.spec.total))
    window = sale_window(load_start, last_at, cell.sold_out_reached, cell.spec.duration_s)
    cell.window_s = round_or_none(window, 3)
    cell.orders_per_sec = round(cell.orders / window, 1) if window else 0.0
    cell.units_per_sec = round(units / window, 1) if window else 0.0
    if t95 is not None and load_start is not None:
        cell.sold_95pct_after_s = round(float(t95) - load_start, 3)


def missing_acks(pg: Pg, sku: str, keys: list[str]) -> list[str]:
    """The acknowledged Idempotency-Keys that no order of the sale carries."""
    if not keys:
        return []
    found = {r[0] for r in pg.rows("SELECT idempotency_key FROM orders WHERE sku = %s AND idempotency_key = ANY(%s)",
                                   (sku, keys))}
    return sorted(k for k in keys if k not in found)


def _why(cell: CellResult) -> str:
    return f" (answers: {', '.join(cell.unexpected_reasons)})" if cell.unexpected_reasons else ""


def check_cell(cell: CellResult) -> list[str]:
    """Correctness checks of one cell; returns human-readable violations. `none` is the control:
    its mission cell must oversell in every mode (else the load did not race, and the zeros of
    the other strategies prove nothing); everything else about it must still hold."""
    v: list[str] = []
    name, a = cell.name, cell.audit
    rc, failed = cell.k6_exit, set(cell.failed_thresholds)
    if cell.k6_verdict in ("missing", "aborted") or rc not in (0, 99):
        v.append(f"{name}: k6 did not complete (exit {rc}, verdict {cell.k6_verdict}); see {cell.k6_log}")
    if a is None:
        v.append(f"{name}: audit unreadable ({cell.audit_error})")
        return v
    if cell.acked_missing:
        v.append(f"{name}: {cell.acked_missing} of {cell.acked} acknowledged orders missing from the orders table "
                 f"(e.g. {', '.join(cell.acked_missing_sample[:3])})")
    if cell.strategy == "none":
        other = failed - NONE_ALLOWED_FAILURES
        if other:
            v.append(f"{name}: k6 thresholds other than oversell crossed: {', '.join(sorted(other))}{_why(cell)}")
        if cell.kind != "mission":
            return v
        if (a.get("oversold") or 0) <= 0:
            v.append(f"{name}: the control did not oversell (oversold=0): the load did not race")
        elif rc == 0:
            v.append(f"{name}: k6 exited 0 although none is expected to cross the oversold threshold")
        return v
    if rc != 0 or failed:
        v.append(f"{name}: k6 thresholds crossed (exit {rc}): {', '.join(sorted(failed)) or '?'}{_why(cell)}")
    return v + audit_violations(name, a)


def audit_violations(name: str, audit: dict) -> list[str]:
    """What a protected strategy's audit must show: nothing oversold or stranded, no user over the
    limit, shards consistent with the orders."""
    v = [f"{name}: audit {key}={audit.get(key)}" for key in ("oversold", "stranded", "users_over_limit")
         if audit.get(key, 0) != 0]
    if audit.get("consistent") is not True:
        v.append(f"{name}: audit consistent={audit.get('consistent')}")
    return v
