"""The speed and correctness targets of a run, as PASS/MISS with a detail line. Pure: built from
the cells, the ceilings, the lock section and the wrk cells; never changes the exit status (the
violations do)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import disk
from .capacity import WrkResult, representing
from .cells import CellResult
from .ceilings import PIPELINE
from .latency import (half_median, half_points, moderate_median, moderate_points, point_flag, server_us_per_order,
                      server_us_total)
from .locks import LOCK_CONCURRENCIES, PEER_LIBRARIES
from .memory import RSS_LIMIT_MIB
from .settings import MODERATE_RATE

TARGETS_DOC = {
    "lockkit_vs_redis": "lockkit uncontended >= 80% of the raw Redis pair rate at every concurrency (1, 16, 64)",
    "lockkit_vs_peers": "lockkit uncontended ahead of every peer library at every concurrency (1, 16, 64)",
    "lockkit_cpu_vs_rslock": "lockkit's plain fenced pair <= 1.5x rslock's Redis CPU per pair (one Redis, uncontended, "
                             "C=16 and C=64)",
    "lockkit_rate_vs_rslock": "lockkit's plain fenced pair >= 0.8x rslock's pairs/s (one Redis, uncontended, C=16 and C=64)",
    "fenced_shard_scaling": "sharded-fenced with 20 shards >= 3x its 1-shard orders/s",
    "fenced_vs_pg": "sharded-fenced with 20 shards >= 60% of pg_order_tps",
    "owned_vs_db_atomic": "owned-shards with 20 shards >= 2x db-atomic with 20 shards in orders/s (throughput cells)",
    "owned_vs_http": "owned-shards with 20 shards >= 60% of the HTTP ceiling (GET /healthz, same arrival model)",
    "owned_redis_per_order": "owned-shards with 20 shards: <= 0.1 Redis commands per order (throughput cell)",
    "owned_pg_per_order": "owned-shards with 20 shards: <= 0.25 PostgreSQL commits per order (throughput cell)",
    "no_oversell": "zero oversold and zero stranded for every strategy except none (owned-unfenced included)",
    "no_lost_acks": "every order acknowledged to a client (201) is in the orders table, every strategy",
    "none_oversells": "none oversells (the control shows the race is real)",
    "capacity_owned_vs_db_atomic": "capacity (wrk): owned-shards >= 4x db-atomic in orders/s",
    "capacity_owned_vs_redis_gate": "capacity (wrk): owned-shards >= 1.5x redis-gate in orders/s",
    "capacity_owned_cpu": "capacity (wrk): owned-shards <= 100 µs of server CPU per order (seckill + PostgreSQL + Redis)",
    "capacity_owned_pg_cpu": "capacity (wrk): owned-shards <= 60 µs of PostgreSQL CPU per order",
    "capacity_owned_seckill_cpu": "capacity (wrk): owned-shards <= 40 µs of seckill CPU per order",
    "storm_owned_clean": "retry storm (wrk, every order sent to both instances at once): owned-shards answers no 5xx and no 503",
    "storm_owned_vs_db_atomic": "retry storm (wrk): owned-shards >= 2x db-atomic in orders/s",
    "hot_owned_clean": "hot users (wrk, 200 buyers): owned-shards answers no 5xx and no 503",
    "hot_owned_vs_db_atomic": "hot users (wrk): owned-shards >= 2x db-atomic in decided answers/s (201, 200, 409: the "
                              "orders themselves stop at 200 users x the per-user limit)",
    "moderate_owned_cpu": f"moderate fixed load (k6, {MODERATE_RATE} arrivals/s): owned-shards <= 200 µs of server CPU per "
                          "order (seckill + PostgreSQL + Redis)",
    "latency_owned_p99": "latency (k6, open model): owned-shards' p99 at 50% of its throughput <= 30 ms",
    "service_rss": f"every seckill instance's peak resident set over the run (VmHWM) < {RSS_LIMIT_MIB} MiB",
}


@dataclass(frozen=True)
class Target:
    id: str
    target: str
    status: str  # PASS or MISS
    detail: str


def _t(key: str, ok: bool, detail: str) -> Target:
    return Target(key, TARGETS_DOC[key], "PASS" if ok else "MISS", detail)


# rslock is the cheapest peer: a plain SET NX lock without a fence. These concurrencies are where
# the fence's cost is judged against it.
RSLOCK_CONCURRENCIES = (16, 64)


def rslock_sides(lk: dict) -> tuple[dict, dict, str]:
    """lockkit's and rslock's figures per concurrency, and where they come from: the medians of the
    alternating head-to-head runs when the run has them, else the one run of each in the tables."""
    versus = lk.get("head_to_head") or {}
    if versus:
        peer = lk.get("head_to_head_peer", "rslock")
        mine = {int(c): v["lockkit"]["median"] for c, v in versus.items()}
        theirs = {int(c): v[peer]["median"] for c, v in versus.items()}
        rounds = min(m.get("runs", 0) for m in [*mine.values(), *theirs.values()])
        return mine, theirs, f" (medians of {rounds} alternating runs each)"

    def runs(rows, library=None):
        return {r.get("concurrency"): r for r in rows or []
                if r.get("mode") == "uncontended" and "error" not in r and (library is None or r.get("library") == library)}

    return runs(lk.get("lockctl")), runs(lk.get("peers"), "rslock"), " (one run each)"


def client_cpu(mine: dict, theirs: dict) -> str:
    """Where pairs/s go on a box shared with Redis: each side's own CPU per pair (the benchmark
    process), when both runs have it."""
    a, b = mine.get("client_cpu_us_per_pair"), theirs.get("client_cpu_us_per_pair")
    return "" if a is None or b is None else f" (client CPU {float(a):.1f} / {float(b):.1f} µs per pair)"


def rslock_targets(lk: dict) -> list[Target]:
    """lockkit on the one Redis against rslock at the same concurrencies: Redis CPU per pair (at most
    1.5x) and pairs/s (at least 0.8x), the latter with each side's client CPU per pair."""
    mine, theirs, source = rslock_sides(lk)
    out = []
    for key, field, limit, ok, unit in (
            ("lockkit_cpu_vs_rslock", "redis_cpu_us_per_pair", 1.5, lambda x: x <= 1.5, " µs"),
            ("lockkit_rate_vs_rslock", "pairs_per_sec", 0.8, lambda x: x >= 0.8, " pairs/s")):
        details, passed = [], True
        for c in RSLOCK_CONCURRENCIES:
            a, b = (mine.get(c) or {}).get(field), (theirs.get(c) or {}).get(field)
            if a is None or not b:
                passed = False
                details.append(f"C={c}: no data")
                continue
            x = float(a) / float(b)
            passed &= ok(x)
            profile = client_cpu(mine[c], theirs[c]) if field == "pairs_per_sec" else ""
            details.append(f"C={c}: {float(a):.1f} / {float(b):.1f}{unit} = {times(x, ok)}{profile}")
        out.append(_t(key, passed, "; ".join(details) + source))
    return out


def lock_targets(lk: dict, smoke: bool) -> list[Target]:
    ratios = lk.get("ratios", {})
    out = rslock_targets(lk)
    if all(ratios.get(str(c), {}).get("vs_redis") is not None for c in LOCK_CONCURRENCIES):
        vals = {c: ratios[str(c)]["vs_redis"] for c in LOCK_CONCURRENCIES}
        piped = {c: ratios[str(c)].get("vs_redis_pipelined") for c in LOCK_CONCURRENCIES}
        info = ""
        if all(v is not None for v in piped.values()):  # informational: not part of the target
            info = (f"; informational, vs redis-benchmark -P {PIPELINE}: "
                    + ", ".join(f"C={c}: {v * 100:.0f}%" for c, v in piped.items()))
        out.append(_t("lockkit_vs_redis", all(v >= 0.8 for v in vals.values()),
                      ", ".join(f"C={c}: {v * 100:.0f}%" for c, v in vals.items()) + info))
    else:
        out.append(_t("lockkit_vs_redis", False, "no data"))
    if not lk.get("peers"):
        out.append(_t("lockkit_vs_peers", False, "peers not run" + (" (smoke mode)" if smoke else "")))
        return out
    worst, ok = [], True

    def faster(v: float) -> bool:  # the target, for the verdict and for the figure's decimals
        return v > 1.0

    for c in LOCK_CONCURRENCIES:
        vp = ratios.get(str(c), {}).get("vs_peers", {})
        missing = [lib for lib in PEER_LIBRARIES if lib not in vp]
        if missing or not vp:
            ok = False
            worst.append(f"C={c}: no data for {', '.join(missing) or 'any peer'}")
            continue
        lib, ratio = min(vp.items(), key=lambda kv: kv[1])
        ok &= faster(ratio)
        worst.append(f"C={c}: {times(ratio, faster)} vs {lib} (closest)")
    out.append(_t("lockkit_vs_peers", ok, "; ".join(worst)))
    return out


def _cpu_note(cell: CellResult) -> str:
    cpu = cell.cpu_profile or {}
    if cpu.get("busy") is None:
        return ""
    return (f"; CPU during the owned-shards cell: {cpu['busy']:.0f}% busy of {cpu.get('cores', 0) * 100}% "
            f"(seckill {cpu.get('seckill', 0):.0f}, postgres {cpu.get('postgres', 0):.0f}, k6 {cpu.get('k6', 0):.0f}, "
            f"redis {cpu.get('redis', 0):.0f})")


def times(x: float, passes: Callable[[float], bool]) -> str:
    """A ratio as the targets show it, 'x1.23': two decimals, or more (up to four) when two would
    put the figure shown on the other side of its target than the ratio itself (1.4953 against
    >= 1.5 shows x1.495, not x1.50)."""
    digits = 2
    while digits < 4 and passes(round(x, digits)) != passes(x):
        digits += 1
    return f"x{x:.{digits}f}"


def _ratio(key: str, num: float | None, den: float | None, floor: float, describe: Callable[[float, str], str],
           missing: str = "no data") -> Target:
    """PASS when num / den >= floor; `describe(x, shown)` says what the ratio x is (`shown`: x as
    `times` writes it); MISS with `missing` when a figure is absent."""
    if num is None or not den:
        return _t(key, False, missing)
    x = num / den
    return _t(key, x >= floor, describe(x, times(x, lambda v: v >= floor)))


def strategy_targets(cells: list[CellResult], ceilings: dict) -> list[Target]:
    by = {(c.strategy, c.shards): c for c in cells if c.kind == "mission"}
    tp = {(c.strategy, c.shards): c for c in cells if c.kind == "throughput"}
    f1, f20 = by.get(("sharded-fenced", 1)), by.get(("sharded-fenced", 20))
    f20_ops = f20.orders_per_sec if f20 else None
    tps = (ceilings.get("pg") or {}).get("pg_order_tps")
    out = [
        _ratio("fenced_shard_scaling", f20_ops if f1 else None, f1.orders_per_sec if f1 else None, 3.0,
               lambda x, shown: f"{f20_ops:.0f} / {f1.orders_per_sec:.0f} orders/s = {shown}"),
        _ratio("fenced_vs_pg", f20_ops, tps, 0.6,
               lambda x, shown: f"{f20_ops:.0f} orders/s = {x * 100:.0f}% of {tps:.0f} tps"),
    ]

    # owned-shards: judged on the throughput cells (steady-state selling) when they ran, else on
    # the mission cells; the other cell's figure is given in the detail.
    def pick(strategy: str) -> CellResult | None:
        return tp.get((strategy, 20)) or by.get((strategy, 20))

    o20, a20, o_mission, am = pick("owned-shards"), pick("db-atomic"), by.get(("owned-shards", 20)), by.get(("db-atomic", 20))

    def vs_atomic(x: float, shown: str) -> str:
        extra = ""
        if o20.kind == "throughput" and o_mission and am and am.orders_per_sec:
            extra = f"; mission cells: {o_mission.orders_per_sec:.0f} / {am.orders_per_sec:.0f} = x{o_mission.orders_per_sec / am.orders_per_sec:.2f}"
        return (f"{o20.kind} cells: {o20.orders_per_sec:.0f} / {a20.orders_per_sec:.0f} orders/s = {shown}{extra}"
                + (_cpu_note(o20) if x < 2.0 else ""))

    same_kind = o20 is not None and a20 is not None and o20.kind == a20.kind
    out.append(_ratio("owned_vs_db_atomic", o20.orders_per_sec if same_kind else None, a20.orders_per_sec if same_kind else None,
                      2.0, vs_atomic))
    http = (ceilings.get("http") or {}).get("http_ok_per_sec")
    out.append(_ratio("owned_vs_http", o20.orders_per_sec if o20 else None, http, 0.6,
                      lambda x, shown: f"{o20.kind} cell: {o20.orders_per_sec:.0f} orders/s = {x * 100:.0f}% of {http:.0f} req/s",
                      "no data" + ("" if http else " (HTTP ceiling not run)")))
    for key, attr, limit, unit in (("owned_redis_per_order", "redis_cmds_per_order", 0.1, "Redis commands"),
                                   ("owned_pg_per_order", "pg_commits_per_order", 0.25, "PostgreSQL commits")):
        v = getattr(o20, attr) if o20 else None
        if v is None:
            out.append(_t(key, False, "no data"))
            continue
        extra = ""
        if o20.kind == "throughput" and o_mission and getattr(o_mission, attr) is not None:
            extra = f"; mission cell: {getattr(o_mission, attr):.3f}"
        out.append(_t(key, v <= limit, f"{o20.kind} cell: {v:.3f} {unit} per order ({o20.orders} orders){extra}"))
    return out


def correctness_targets(cells: list[CellResult]) -> list[Target]:
    others = [c for c in cells if c.strategy != "none"]
    bad = [f"{c.name}: oversold={c.oversold} stranded={c.stranded}" for c in others if c.oversold != 0 or c.stranded != 0]
    lost = [f"{c.name}: {c.acked_missing} of {c.acked}" for c in cells if c.acked_missing != 0]
    nones = [c for c in cells if c.strategy == "none" and c.kind == "mission"]
    acked = sum(c.acked or 0 for c in cells)
    return [
        _t("no_oversell", bool(others) and not bad, "; ".join(bad) if bad else f"{len(others)} cells clean"),
        _t("no_lost_acks", bool(cells) and not lost,
           "; ".join(lost) + " missing" if lost else f"{acked} acknowledged orders, all in the orders table"),
        _t("none_oversells", bool(nones) and all((c.oversold or 0) > 0 for c in nones),
           ", ".join(f"{c.shards} shard(s): oversold={c.oversold}" for c in nones) or "not run"),
    ]


def _clean(key: str, c: WrkResult | None) -> Target:
    if c is None:
        return _t(key, False, "not run")
    return _t(key, c.busy_503 == 0 and c.server_5xx == 0,
              f"{c.busy_503} answers 503, {c.server_5xx} other 5xx, of {c.requests} requests")


def capacity_targets(cells: list[WrkResult]) -> list[Target]:
    """The wrk cells' targets (none when no wrk cell ran, e.g. smoke or --no-capacity)."""
    if not cells:
        return []
    by = {(c.kind, c.strategy): c for c in representing(cells)}

    def vs(key: str, kind: str, other: str, floor: float, attr: str = "orders_per_sec", unit: str = "orders/s") -> Target:
        o, x = by.get((kind, "owned-shards")), by.get((kind, other))
        num, den = (getattr(o, attr) if o else None), (getattr(x, attr) if x else None)
        return _ratio(key, num, den, floor, lambda r, shown: f"{num:.0f} / {den:.0f} {unit} = {shown}{medians_of(o, x)}")

    cap = by.get(("capacity", "owned-shards"))
    cost = (cap.cpu_us_per_order if cap else None) or {}
    out = [vs("capacity_owned_vs_db_atomic", "capacity", "db-atomic", 4.0),
           vs("capacity_owned_vs_redis_gate", "capacity", "redis-gate", 1.5)]
    for key, part, limit in (("capacity_owned_cpu", "total", 100), ("capacity_owned_pg_cpu", "postgres", 60),
                             ("capacity_owned_seckill_cpu", "seckill", 40)):
        v = cost.get(part)
        out.append(_t(key, False, "no data") if v is None else
                   _t(key, v <= limit, f"{v:.0f} µs per order (seckill {cost['seckill']:.0f} + PostgreSQL "
                                       f"{cost['postgres']:.0f} + Redis {cost['redis']:.0f} = {cost['total']:.0f}; "
                                       f"{cap.orders} orders){medians_of(cap)}"))
    out += [_clean("storm_owned_clean", by.get(("storm", "owned-shards"))),
            vs("storm_owned_vs_db_atomic", "storm", "db-atomic", 2.0),
            _clean("hot_owned_clean", by.get(("hot-users", "owned-shards"))),
            vs("hot_owned_vs_db_atomic", "hot-users", "db-atomic", 2.0, "decided_per_sec", "decided answers/s")]
    return out


def medians_of(*cells: WrkResult | None) -> str:
    """How a target's cells were chosen, when one of them stands for several rounds."""
    ran = [c for c in cells if c is not None]
    rounds = max((c.represents for c in ran), default=1)
    if rounds <= 1:
        return ""
    conns = " and ".join(str(c.spec.connections) for c in ran)
    return (f" (each the median run by orders/s of {rounds} rounds at the number of connections per instance where "
            f"that median is highest: {conns})")


def latency_targets(points: list[CellResult], http_floor: dict | None = None, disk_floor: dict | None = None) -> list[Target]:
    """owned-shards' points: the cost per order at the moderate fixed load, beside the HTTP floor
    at that rate when it was measured (`ceilings.http_floor_at`), and the p99 at half its
    throughput cell (none when it ran no latency point), beside the disk's flush floor when it was
    measured (`disk.flush_floor`). The half is of what k6 reached: half of the wrk capacity is more
    than k6 can offer on a small box, which the detail says."""
    owned = [c for c in points if c.strategy == "owned-shards" and c.shards == 20]
    if not owned:
        return []
    out = []
    moderate = moderate_median(owned)
    cost = server_us_per_order(moderate) if moderate else None
    if cost is None or point_flag(moderate):
        why = "not run" if moderate is None else point_flag(moderate) or "no CPU profile"
        out.append(_t("moderate_owned_cpu", False, why))
    else:
        out.append(_t("moderate_owned_cpu", cost["total"] <= 200,
                      f"{cost['total']:.0f} µs per order (seckill {cost['seckill']:.0f} + PostgreSQL {cost['postgres']:.0f} "
                      f"+ Redis {cost['redis']:.0f}) at {moderate.orders_per_sec:.0f} orders/s, {moderate.orders} orders"
                      + per_commit(moderate, cost["postgres"])
                      + rounds_of(moderate_points(owned), moderate, "µs per order", server_us_total)
                      + moderate_floor(http_floor)))
    half = half_median(owned)
    if half is None or point_flag(half):
        out.append(_t("latency_owned_p99", False, "not run" if half is None else point_flag(half)))
    else:
        out.append(_t("latency_owned_p99", half.p99_ms <= 30,
                      f"p99 {half.p99_ms:.1f} ms at {half.spec.rate} arrivals/s, 50% of the k6 throughput cell (k6 cannot "
                      "offer half of the wrk capacity on this box)"
                      + rounds_of(half_points(owned), half, "p99 ms", lambda c: c.p99_ms) + flush_floor_of(disk_floor)))
    return out


def flush_floor_of(disk_floor: dict | None) -> str:
    """The disk's flush floor, as the latency target's detail adds it ('' if not measured): every
    order waits for a WAL flush, so a stalled flush is a floor under the p99."""
    if not disk_floor:
        return ""
    return f"; the disk's flush floor in this run: {disk.describe(disk_floor)}"


def rounds_of(rounds: list[CellResult], median: CellResult, unit: str, measure: Callable[[CellResult], float | None]) -> str:
    """A target point's rounds, as its target's detail adds them ('' for a single run): which
    round is the median, and each round's `measure` in `unit` (or why it cannot be quoted)."""
    if len(rounds) <= 1:
        return ""

    def one(c: CellResult) -> str:
        m = measure(c)
        return point_flag(c) or ("not measured" if m is None else f"{m:.{0 if m >= 100 else 1}f}")

    return (f"; the median of {len(rounds)} rounds (round {median.spec.round_no}; {unit} by round: "
            + ", ".join(one(c) for c in rounds) + ")")


def per_commit(cell: CellResult, pg_us_per_order: float) -> str:
    """PostgreSQL's share of an order split into what a commit costs it and how many orders share
    one (a batch's cost is mostly fixed below capacity), as the cost target's detail adds it ('' if
    the commits were not counted)."""
    commits = cell.pg_commits_per_order
    if not commits:
        return ""
    return (f"; PostgreSQL {pg_us_per_order / commits:.0f} µs per commit x {commits:.3f} commits per order "
            f"(about {1 / commits:.0f} orders per commit)")


def moderate_floor(http_floor: dict | None) -> str:
    """The HTTP floor at the moderate rate, as the cost target's detail adds it ('' if not measured)."""
    us = (http_floor or {}).get("seckill_us_per_request")
    if us is None:
        return ""
    return (f"; HTTP floor at this rate: seckill {us:.0f} µs per GET /healthz (k6, same rate and VU pool, "
            f"{http_floor['ok']} requests)")


def memory_targets(peaks: dict[str, float | None]) -> list[Target]:
    """Each seckill instance's peak RSS against the bound (none when no instance ran, e.g.
    --only-locks); an instance whose peak could not be read misses."""
    if not peaks:
        return []
    read = {name: mib for name, mib in peaks.items() if mib is not None}
    listed = ", ".join(f"{name} {mib:.1f} MiB" for name, mib in sorted(read.items()))
    unread = sorted(set(peaks) - set(read))
    if unread:
        return [_t("service_rss", False, f"not read for {', '.join(unread)}" + (f"; {listed}" if listed else ""))]
    return [_t("service_rss", max(read.values()) < RSS_LIMIT_MIB, listed)]


def evaluate_targets(cells: list[CellResult], ceilings: dict, lk: dict, smoke: bool,
                     capacity: list[WrkResult] | None = None, points: list[CellResult] | None = None,
                     rss: dict[str, float | None] | None = None) -> list[Target]:
    """Every target of a run; the wrk cells' only outside smoke mode (its storm cell is a check)."""
    return (lock_targets(lk, smoke) + strategy_targets(cells, ceilings) + correctness_targets(cells)
            + ([] if smoke else capacity_targets(capacity or [])
                                + latency_targets(points or [], ceilings.get("http_moderate"), ceilings.get("disk_flush")))
            + memory_targets(rss or {}))
