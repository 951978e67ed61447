"""The wrk cells: what the service really absorbs and what an order costs it in CPU, measured with
a load generator cheap enough to leave the box to the service: k6 costs about 285 µs of CPU per
request and tops out near 6 000 `GET /healthz`/s here; wrk costs about 10 µs per `GET /healthz`
and 20 to 50 per order (its Lua builds every request and reads every answer's status).

Every cell is one wrk process per seckill instance (`loadtest/wrk/*.lua`), each connection
sending its next request as soon as the previous one is answered, for a fixed time, on a fresh
sale of `CAPACITY_STOCK` units over 20 shards:

    capacity   fresh Idempotency-Key per request, users drawn from 10 000 000 (the per-user
               limit never caps), 1 or 2 units as the k6 library's mix: the service's capacity
    storm      the same, but both wrk processes send the identical sequence (same keys, users,
               quantities): every order arrives at both instances at about the same time, as a
               client retrying against the other instance would send it; each key may make one
               order, the other instance answers the replay (or the race's loser, 503)
    hot-users  fresh keys, every order from the same 200 users: after a few hundred orders every
               answer is a per-user refusal (409 user_limit_reached, expected), which these users'
               rows decide under contention
    healthz    GET /healthz: the HTTP floor, seckill's CPU per request for HTTP alone

Around each cell the CPU time of every seckill and postgres process and of the service's
redis-server (`cpu.py`) and wrk's own (a waited-for child) give the CPU per order by component.
`check_wrk_cell` is the pure correctness check of a result; the targets are in targets.py, the
table in report_md.py.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field

from . import cpu
from .cells import CellContext, audit_violations, fetch_audit
from .processes import http_json, log, log_findings, rel, run_together
from .quiet import ready
from .settings import (CAPACITY_CONNECTIONS, CAPACITY_ROUNDS, CAPACITY_SHARDS, CAPACITY_STOCK, CAPACITY_STRATEGIES,
                       HOT_USERS, THROUGHPUT_USERS, WRK_CONNECTIONS, WRK_HEALTHZ, WRK_ORDERS, WRK_THREADS, WRK_TIMEOUT_S,
                       LoadModel, payment_window_ms)

WRK_KINDS = ("capacity", "storm", "hot-users", "healthz")
_SUFFIX = {"capacity": "cap", "storm": "storm", "hot-users": "hot"}
# The server side of a cell's CPU: the process groups of cpu.PROFILE_GROUPS that serve an order.
SERVER_GROUPS = ("seckill", "postgres", "redis")
# Answers that decide an order, one way or the other: taken, replayed, refused (sold out, limit).
DECIDED = ("201", "200", "409")
_RESULT_LINE = re.compile(r"^wrk-result (\{.*\})\s*$", re.M)


@dataclass(frozen=True)
class WrkSpec:
    """What one wrk cell runs: `strategy` is None for the healthz floor."""

    kind: str  # one of WRK_KINDS
    strategy: str | None
    duration_s: int
    shards: int = CAPACITY_SHARDS
    total: int = CAPACITY_STOCK
    connections: int = WRK_CONNECTIONS  # per instance
    threads: int = WRK_THREADS  # per wrk process
    # 1, 2, ...: one of several runs of this cell, at each of CAPACITY_CONNECTIONS (`capacity_specs`);
    # 0: its only run
    round_no: int = 0

    @property
    def users(self) -> int:
        return HOT_USERS if self.kind == "hot-users" else THROUGHPUT_USERS

    @property
    def label(self) -> str:
        if self.strategy is None:
            return "healthz floor"
        run = f", {self.connections} connections, round {self.round_no}" if self.round_no else ""
        return f"{self.strategy}/{self.shards} ({self.kind}{run})"

    @property
    def stem(self) -> str:
        """What names this run's sale (after the run id) and its wrk logs (before the instance):
        unique among the runs of one bench."""
        if self.strategy is None:
            return "healthz"
        run = f"-c{self.connections}-r{self.round_no}" if self.round_no else ""
        return f"{self.strategy}-{self.shards}-{_SUFFIX[self.kind]}{run}"

    def sku(self, run_id: str) -> str:
        return "" if self.strategy is None else f"bench-{run_id}-{self.stem}"


def capacity_specs(mode: str, duration_s: int) -> list[WrkSpec]:
    """Full mode: the HTTP floor, then each kind for every strategy (kind by kind, so that the
    strategies compared in a kind run close together). The capacity cells run in
    `CAPACITY_ROUNDS` rounds, each starting one strategy further on, so that every strategy runs
    first, second and third equally often; a strategy runs at each of `CAPACITY_CONNECTIONS` in
    turn, in the reverse order every other round. Smoke: the retry storm of owned-shards only, whose
    correctness (one order per key, no 5xx) CI must see."""
    if mode == "smoke":
        return [WrkSpec("storm", "owned-shards", duration_s, connections=32)]
    n = len(CAPACITY_STRATEGIES)
    rounds = [WrkSpec("capacity", CAPACITY_STRATEGIES[(r + i) % n], duration_s, connections=c, round_no=r + 1)
              for r in range(CAPACITY_ROUNDS) for i in range(n)
              for c in (CAPACITY_CONNECTIONS if r % 2 == 0 else CAPACITY_CONNECTIONS[::-1])]
    once = [WrkSpec(kind, s, duration_s) for kind in ("storm", "hot-users") for s in CAPACITY_STRATEGIES]
    return [WrkSpec("healthz", None, duration_s)] + rounds + once


def mark_medians(cells: list[WrkResult]) -> None:
    """Sets `median` and `represents` on every cell. A cell run once is its own median and
    represents itself (1). Of a cell run in rounds at one number of connections, the run with the
    median orders/s is the median (with an even number of rounds, the lower middle run); of a
    strategy's medians at its numbers of connections, the one with the most orders/s, its capacity,
    represents that number's runs (their number), and every other run nothing (0). The targets and
    the READMEs read the representing runs only; the full report lists every run."""
    levels: dict[tuple[str, str | None, int], list[WrkResult]] = {}
    for c in cells:
        levels.setdefault((c.kind, c.strategy, c.spec.connections), []).append(c)
    best: dict[tuple[str, str | None], WrkResult] = {}
    for runs in levels.values():
        median = sorted(runs, key=lambda c: c.orders_per_sec)[(len(runs) - 1) // 2]
        for c in runs:
            c.median, c.represents = c is median, 0
        median.represents = len(runs)
        key = (median.kind, median.strategy)
        if key not in best or median.orders_per_sec > best[key].orders_per_sec:
            best[key] = median
    for c in cells:
        if c.represents and best[(c.kind, c.strategy)] is not c:
            c.represents = 0


def representing(cells: list[WrkResult]) -> list[WrkResult]:
    """The cells that stand for their kind and strategy (see `mark_medians`), in run order."""
    return [c for c in cells if c.represents]


@dataclass
class WrkRun:
    """One wrk process's `wrk-result` line (loadtest/wrk/*.lua)."""

    requests: int
    duration_s: float
    errors: dict[str, int]  # socket connect/read/write/timeout, and status (answers >= 400)
    latency_us: dict[str, float]  # p50, p90, p99, max, mean
    answers: dict[str, int]  # "201": n, ..., and "409 user_limit_reached": n for answers >= 400


def parse_wrk(text: str) -> WrkRun | None:
    """The last `wrk-result {json}` line of a wrk run's output; None when there is none."""
    found = _RESULT_LINE.findall(text)
    if not found:
        return None
    try:
        d = json.loads(found[-1])
        return WrkRun(requests=int(d["requests"]), duration_s=d["duration_us"] / 1e6, errors=d["errors"],
                      latency_us=d["latency_us"], answers={str(k): int(v) for k, v in d.get("answers", {}).items()})
    except (ValueError, KeyError, TypeError):
        return None


def merge_answers(runs: list[WrkRun]) -> dict[str, int]:
    total: dict[str, int] = {}
    for r in runs:
        for k, v in r.answers.items():
            total[k] = total.get(k, 0) + v
    return dict(sorted(total.items()))


def status_count(answers: dict[str, int], pred) -> int:
    """Answers whose status (the plain numeric keys) satisfies `pred`."""
    return sum(v for k, v in answers.items() if k.isdigit() and pred(int(k)))


def box_cpu_pct(res: WrkResult) -> float | None:
    """The whole machine's CPU over the cell's window, in % of one core."""
    busy = res.cpu_s.get("busy")
    return None if busy is None or res.cpu_window_s <= 0 else round(busy / res.cpu_window_s * 100, 1)


def cpu_costs(cpu_s: dict[str, float], n: int) -> dict[str, float] | None:
    """µs of CPU per unit of work (an order, or a request) of each server component and their
    total; None without work."""
    if n <= 0:
        return None
    out = {g: round(cpu_s.get(g, 0.0) * 1e6 / n, 1) for g in SERVER_GROUPS}
    out["total"] = round(sum(cpu_s.get(g, 0.0) for g in SERVER_GROUPS) * 1e6 / n, 1)
    return out


@dataclass
class WrkResult:
    """What one wrk cell measured: answers as wrk counted them (both instances added), orders
    from PostgreSQL, CPU from /proc and this runner's children times."""

    spec: WrkSpec
    sku: str = ""
    wrk_exit: list[int] = field(default_factory=list)
    wrk_logs: list[str] = field(default_factory=list)
    wrk_unparsed: list[str] = field(default_factory=list)  # logs without a wrk-result line
    load_s: float = 0.0  # the longer of the two wrk runs
    requests: int = 0
    answers: dict[str, int] = field(default_factory=dict)
    ok_2xx: int = 0
    created: int = 0  # 201: a new order, as the client was told
    replayed: int = 0  # 200 on the orders route: the order of a key already used
    client_4xx: int = 0
    busy_503: int = 0
    server_5xx: int = 0  # 5xx other than 503
    socket_errors: int = 0  # connect, read, write errors and timeouts: no answer at all
    p50_ms: float | None = None  # the worse of the two instances (percentiles cannot be merged)
    p99_ms: float | None = None
    orders: int = 0  # in PostgreSQL once the cell is over (redis-gate: after its queue drained)
    units: int = 0
    orders_in_load: int = 0  # in PostgreSQL when the load ended: what the rate counts
    orders_per_sec: float = 0.0  # orders_in_load / load_s: orders durably written per second of load
    drain_s: float | None = None  # redis-gate: how long its writer took to catch up after the load
    decided_per_sec: float = 0.0  # 201 + 200 + 409 answers per second (healthz: 2xx per second)
    duplicate_keys: int | None = None  # Idempotency-Keys with more than one order
    drain: str | None = None  # redis-gate: the reconcile?drain=1 answer before counting orders
    audit: dict | None = None
    audit_error: str | None = None
    cpu_s: dict[str, float] = field(default_factory=dict)  # server groups, "wrk" and "busy" (the whole box)
    cpu_window_s: float = 0.0  # the wall time those were measured over (the load and the drain)
    cpu_us_per_order: dict[str, float] | None = None
    cpu_us_per_request: dict[str, float] | None = None
    wrk_us_per_request: float | None = None
    service_log: dict = field(default_factory=lambda: {"warn": 0, "error": 0, "samples": []})
    violations: list[str] = field(default_factory=list)
    median: bool = True  # the median run of its cell at its connections (`mark_medians`)
    represents: int = 1  # how many runs of this cell it stands for in the targets (`mark_medians`)

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def strategy(self) -> str | None:
        return self.spec.strategy

    @property
    def name(self) -> str:
        return self.spec.label

    def to_json(self) -> dict:
        out = asdict(self)
        return {**out.pop("spec"), "users": self.spec.users, **out}


def read_runs(res: WrkResult, runs: list[WrkRun | None]) -> None:
    """Answers, latency and rates from the wrk runs (both instances; None: no result line)."""
    done = [r for r in runs if r is not None]
    res.wrk_unparsed = [path for path, r in zip(res.wrk_logs, runs, strict=True) if r is None]
    res.load_s = round(max((r.duration_s for r in done), default=0.0), 3)
    res.requests = sum(r.requests for r in done)
    res.answers = merge_answers(done)
    res.socket_errors = sum(r.errors.get(k, 0) for r in done for k in ("connect", "read", "write", "timeout"))
    if res.kind == "healthz":  # healthz.lua counts no statuses: wrk's own count of answers >= 400
        bad = sum(r.errors.get("status", 0) for r in done)
        res.ok_2xx, res.client_4xx = res.requests - bad, bad
        decided = res.ok_2xx
    else:
        a = res.answers
        res.ok_2xx = status_count(a, lambda s: 200 <= s < 300)
        res.created, res.replayed = a.get("201", 0), a.get("200", 0)
        res.client_4xx = status_count(a, lambda s: 400 <= s < 500)
        res.busy_503 = a.get("503", 0)
        res.server_5xx = status_count(a, lambda s: s >= 500 and s != 503)
        decided = sum(a.get(k, 0) for k in DECIDED)
    if done:
        res.p50_ms = round(max(r.latency_us["p50"] for r in done) / 1000, 2)
        res.p99_ms = round(max(r.latency_us["p99"] for r in done) / 1000, 2)
    if res.load_s > 0:
        res.decided_per_sec = round(decided / res.load_s, 1)


def read_costs(res: WrkResult, cpu_s: dict[str, float], wrk_cpu_s: float, window_s: float) -> None:
    kept = {k: v for k, v in cpu_s.items() if k in SERVER_GROUPS or k == "busy"}
    res.cpu_s = {k: round(v, 3) for k, v in {**kept, "wrk": wrk_cpu_s}.items()}
    res.cpu_window_s = round(window_s, 3)
    res.cpu_us_per_order = cpu_costs(cpu_s, res.orders) if res.kind != "healthz" else None
    res.cpu_us_per_request = cpu_costs(cpu_s, res.requests)
    res.wrk_us_per_request = round(wrk_cpu_s * 1e6 / res.requests, 1) if res.requests else None


def wrk_command(spec: WrkSpec, base: str, script_args: list[str]) -> list[str]:
    cmd = ["wrk", "-t", str(spec.threads), "-c", str(spec.connections), "-d", f"{spec.duration_s}s",
           "--timeout", f"{WRK_TIMEOUT_S}s"]
    if spec.kind == "healthz":
        return cmd + ["-s", str(WRK_HEALTHZ), f"{base}/healthz"]
    return cmd + ["-s", str(WRK_ORDERS), base, "--", *script_args]


def order_args(spec: WrkSpec, sku: str, instance: int, model: LoadModel) -> list[str]:
    """orders.lua's arguments for one instance: the storm gives both the same keys and seed
    (the identical sequence); the other cells give each instance its own."""
    same = spec.kind == "storm"
    cum, mix = 0.0, []
    for q, w in model.qty_weights():
        cum += w
        mix.append(f"{q}:{cum:.6f}")
    mix[-1] = mix[-1].rpartition(":")[0] + ":1"  # the last quantity takes whatever rounding left
    keys = f"w{spec.kind[0]}" if same else f"w{spec.kind[0]}{instance}"
    return [sku, str(spec.users), keys, "1" if same else str(instance), ",".join(mix)]


def sale_body(spec: WrkSpec, model: LoadModel) -> dict:
    """The cell's sale, as the k6 library's setup() creates one: the k6 defaults' limits, and the
    bench's payment window for an owned strategy."""
    body = {"total": spec.total, "shards": spec.shards, "per_user_limit": model.per_user_limit,
            "max_per_order": model.max_per_order, "strategy": spec.strategy}
    if (window := payment_window_ms(spec.strategy)) is not None:
        body["payment_window_ms"] = window
    return body


def create_sale(ctx: CellContext, spec: WrkSpec, sku: str, model: LoadModel) -> None:
    """PUT the sale (`sale_body`) with the admin token."""
    status, answer = http_json("PUT", f"{ctx.instances[0].base}/v1/sales/{sku}", sale_body(spec, model),
                               headers={"Authorization": f"Bearer {ctx.token}"}, timeout=30)
    if status not in (200, 201):
        raise OSError(f"PUT /v1/sales/{sku} -> {status}: {str(answer)[:300]}")


def drain_gate(ctx: CellContext, sku: str) -> str:
    """redis-gate acknowledges before its writer commits: wait (bounded, by the service) for its
    queue to empty, as the k6 library's teardown does, so that the orders table is complete."""
    try:
        status, body = http_json("POST", f"{ctx.instances[0].base}/v1/sales/{sku}/reconcile?drain=1",
                                 headers={"Authorization": f"Bearer {ctx.token}"}, timeout=60)
    except OSError as e:
        return f"error: {e}"
    return f"{status} {json.dumps(body)[:300]}"


def count_orders(ctx: CellContext, sku: str) -> int:
    return int(ctx.pg.rows("SELECT count(*) FROM orders WHERE sku = %s", (sku,))[0][0])


def read_orders(res: WrkResult, ctx: CellContext) -> None:
    row = ctx.pg.rows("SELECT count(*), COALESCE(sum(quantity), 0) FROM orders WHERE sku = %s", (res.sku,))[0]
    res.orders, res.units = int(row[0]), int(row[1])
    res.duplicate_keys = len(ctx.pg.rows("SELECT idempotency_key, count(*) FROM orders WHERE sku = %s "
                                         "GROUP BY 1 HAVING count(*) > 1", (res.sku,)))
    res.orders_per_sec = round(res.orders_in_load / res.load_s, 1) if res.load_s > 0 else 0.0


def run_wrk_cell(ctx: CellContext, spec: WrkSpec, model: LoadModel) -> WrkResult:
    """Runs one wrk cell and reads back everything about it (see the module doc)."""
    res = WrkResult(spec=spec, sku=spec.sku(ctx.run_id))
    logs = [ctx.run_dir / f"wrk-{spec.stem}-{i.name}.log" for i in ctx.instances]
    res.wrk_logs = [rel(p) for p in logs]
    if spec.strategy is not None:
        try:
            create_sale(ctx, spec, res.sku, model)
        except OSError as e:
            res.violations = [f"{res.name}: the sale could not be created ({e})"]
            return res
    cmds = [wrk_command(spec, inst.base, order_args(spec, res.sku, int(inst.name), model)) for inst in ctx.instances]
    log_offsets = [i.log_size() for i in ctx.instances]
    # The CPU window: from before the load to after redis-gate's writer has caught up (its
    # commits are part of what its orders cost). wrk has ended by then: its CPU is in this
    # runner's children times, and nothing else is started in between.
    cpu_before, wrk_before, t0 = cpu.process_ticks(), cpu.children_cpu_s(), time.monotonic()
    res.wrk_exit = run_together(cmds, logs, timeout=spec.duration_s + 30, what=f"wrk {res.name}")
    wrk_cpu_s = cpu.children_cpu_s() - wrk_before
    if spec.strategy is not None:
        # The rate counts what is durable when the load ends. redis-gate acknowledges before its
        # writer commits: the orders it writes after the load, while nothing else runs, count in
        # its cost per order, not in its rate (a few hundred of 88 835 in one capacity cell).
        res.orders_in_load = count_orders(ctx, res.sku)
    if spec.strategy is not None and spec.strategy.startswith("redis-gate"):
        drain_start = time.monotonic()
        res.drain = drain_gate(ctx, res.sku)
        res.drain_s = round(time.monotonic() - drain_start, 3)
    cpu_s, window_s = cpu.group_cpu_s(cpu_before, cpu.process_ticks()), time.monotonic() - t0

    read_runs(res, [parse_wrk(p.read_text(errors="replace")) if p.exists() else None for p in logs])
    if spec.strategy is not None:
        read_orders(res, ctx)
        res.audit, res.audit_error = fetch_audit(ctx.instances[-1], res.sku)
    read_costs(res, cpu_s, wrk_cpu_s, window_s)
    findings = [log_findings(inst.log_since(off), limit=4) for inst, off in zip(ctx.instances, log_offsets, strict=True)]
    res.service_log = {"warn": sum(f["warn"] for f in findings), "error": sum(f["error"] for f in findings),
                       "samples": [s for f in findings for s in f["samples"]][:6]}
    res.violations = check_wrk_cell(res)
    return res


def check_wrk_cell(res: WrkResult) -> list[str]:
    """Correctness of one wrk cell; returns human-readable violations. 503 busy and 409 refusals
    are answers the API allows (reported, judged by the targets); a 5xx other than 503 is not.
    The one-order-per-key check cannot fail while the unique index on (sku, idempotency_key)
    exists: it is here because the migrations that define that index keep changing."""
    name, v = res.name, []
    if len(res.wrk_exit) != len(res.wrk_logs) or any(rc != 0 for rc in res.wrk_exit) or res.wrk_unparsed:
        v.append(f"{name}: wrk did not complete (exit {res.wrk_exit}, no result in {res.wrk_unparsed}); "
                 f"see {', '.join(res.wrk_logs)}")
    elif res.requests == 0:
        v.append(f"{name}: no request was answered; see {', '.join(res.wrk_logs)}")
    if res.server_5xx:
        kinds = ", ".join(f"{k}: {n}" for k, n in res.answers.items() if not k.isdigit() and k[0] == "5" and k[:3] != "503")
        v.append(f"{name}: {res.server_5xx} answers 5xx other than 503 ({kinds or 'no body'})")
    if res.kind == "healthz":
        if res.client_4xx:
            v.append(f"{name}: {res.client_4xx} answers >= 400 to GET /healthz")
        return v
    if res.duplicate_keys:
        v.append(f"{name}: {res.duplicate_keys} Idempotency-Keys with more than one order")
    if res.created > res.orders:
        v.append(f"{name}: {res.created} answers 201 but {res.orders} orders in the orders table "
                 f"({res.created - res.orders} acknowledged orders missing)" + (f"; drain: {res.drain}" if res.drain else ""))
    reused = res.answers.get("422 idempotency_key_reused", 0)
    if res.kind == "storm" and reused:
        v.append(f"{name}: {reused} answers 422 idempotency_key_reused to byte-identical retries")
    if res.audit is None:
        v.append(f"{name}: audit unreadable ({res.audit_error})")
    else:
        v += audit_violations(name, res.audit)
    return v


def describe(res: WrkResult) -> str:
    cost = res.cpu_us_per_request if res.kind == "healthz" else res.cpu_us_per_order
    per = "request" if res.kind == "healthz" else "order"
    text = (f"    {res.orders_per_sec:.0f} orders/s ({res.orders} orders), {res.decided_per_sec:.0f} decided/s, "
            f"{res.requests} requests, 2xx {res.ok_2xx}, 4xx {res.client_4xx}, 503 {res.busy_503}, other 5xx {res.server_5xx}, "
            f"socket errors {res.socket_errors}, p50 {res.p50_ms} ms, p99 {res.p99_ms} ms, "
            f"server CPU µs/{per} {cost}, wrk µs/request {res.wrk_us_per_request}")
    return text + (f"  VIOLATION: {'; '.join(res.violations)}" if res.violations else "")


def run_capacity(ctx: CellContext, specs: list[WrkSpec], model: LoadModel) -> list[WrkResult]:
    """Every wrk cell in order, each logged as it ends."""
    out = []
    for n, spec in enumerate(specs, 1):
        log(f"[wrk {n}/{len(specs)}] {spec.label}: {spec.connections} connections x {len(ctx.instances)} instances, "
            f"{spec.duration_s} s" + ("" if spec.strategy is None else f", {spec.total} units, {spec.users} users"))
        ready(ctx.pg, "the cell")
        t0 = time.monotonic()
        out.append(run_wrk_cell(ctx, spec, model))
        log(describe(out[-1]) + f" ({time.monotonic() - t0:.0f} s)")
    mark_medians(out)
    return out
