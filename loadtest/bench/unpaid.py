"""The lifecycle cell of the smoke run: `loadtest/k6/unpaid.js` against both instances, a sale of an
owned strategy where a share of buyers never pay. Their orders expire, the units come back through
the shards' owners and are sold again; k6's teardown then buys and pays what is left. At the end
every unit must be paid, units must have come back, and the sale page's data (the live view of
each instance) must show the audit's reserved, paid and returned.

k6 checks that itself (its exit status is non-zero when a threshold fails); this module runs it,
reads the audit and the live views again from here, and turns both into violations with
`check_unpaid`, a pure function.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from .cells import CellContext, audit_violations, fetch_audit
from .processes import http_json, read_json, rel, run_k6
from .settings import K6_UNPAID

# What the page shows and the audit must agree with.
UNITS = ("reserved", "paid", "returned")


@dataclass(frozen=True)
class UnpaidSpec:
    """A small sale: about 40 % of the first buyers walk away, their orders expire after the
    window, and the load lasts long enough for some returned units to be sold again during it."""

    total: int = 300
    shards: int = 4
    rate: int = 100  # arrivals per second, each buying one unit
    duration_s: int = 4
    pay_share: float = 0.6
    window_ms: int = 1500
    drain_timeout_s: int = 20  # teardown's bound for buying and paying what is left

    def sku(self, run_id: str) -> str:
        return f"bench-{run_id}-unpaid"

    def timeout_s(self) -> float:
        """k6's whole run: start, load, teardown (drain, the last window, audit), with margin."""
        return self.duration_s + self.drain_timeout_s + self.window_ms / 1000 + 60


@dataclass
class UnpaidResult:
    spec: UnpaidSpec
    sku: str = ""
    k6_exit: int = -1
    k6_wall_s: float = 0.0
    k6_log: str = ""
    counts: dict = field(default_factory=dict)  # unpaid.js's counters (orders_reserved, orders_paid, ...)
    audit: dict | None = None
    audit_error: str | None = None
    live: dict[str, dict | None] = field(default_factory=dict)  # instance -> its live view's sale
    violations: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def k6_env(ctx: CellContext, spec: UnpaidSpec, summary_path) -> dict[str, str]:
    return {"TARGETS": ",".join(i.base for i in ctx.instances), "ADMIN_TOKEN": ctx.token, "SKU": spec.sku(ctx.run_id),
            "TOTAL": str(spec.total), "SHARDS": str(spec.shards), "RATE": str(spec.rate),
            "DURATION": f"{spec.duration_s}s", "PAY_SHARE": str(spec.pay_share), "WINDOW_MS": str(spec.window_ms),
            "DRAIN_TIMEOUT": str(spec.drain_timeout_s), "SUMMARY_PATH": str(summary_path)}


def run_unpaid(ctx: CellContext, spec: UnpaidSpec) -> UnpaidResult:
    summary_path, k6_log = ctx.run_dir / "k6-unpaid.json", ctx.run_dir / "k6-unpaid.log"
    res = UnpaidResult(spec=spec, sku=spec.sku(ctx.run_id), k6_log=rel(k6_log))
    t0 = time.monotonic()
    res.k6_exit = run_k6(K6_UNPAID, k6_env(ctx, spec, summary_path), k6_log, timeout=spec.timeout_s())
    res.k6_wall_s = round(time.monotonic() - t0, 1)
    res.counts = read_json(summary_path)
    res.audit, res.audit_error = fetch_audit(ctx.instances[-1], res.sku)
    for inst in ctx.instances:
        try:
            status, body = http_json("GET", f"{inst.base}/v1/sales/{res.sku}/live", timeout=30)
        except OSError:
            status, body = None, None
        res.live[inst.name] = body["sale"] if status == 200 and isinstance(body, dict) else None
    res.violations = check_unpaid(res)
    return res


def check_unpaid(res: UnpaidResult) -> list[str]:
    """Every unit paid, units returned, the books exact, and every live view showing the audit's
    reserved, paid and returned; k6's own verdict (exit status) counts too."""
    v = []
    if res.k6_exit != 0:
        v.append(f"unpaid: k6 exited {res.k6_exit} (a threshold or the teardown's checks failed; see {res.k6_log})")
    a = res.audit
    if a is None:
        return v + [f"unpaid: no audit ({res.audit_error})"]
    if a.get("paid") != a.get("total") or a.get("reserved") != 0:
        v.append(f"unpaid: {a.get('paid')} of {a.get('total')} units paid, {a.get('reserved')} reserved at the end")
    if not a.get("returned", 0) > 0:
        v.append("unpaid: no unit came back from an unpaid order")
    v += audit_violations("unpaid", a)
    for name, live in res.live.items():
        if live is None:
            v.append(f"unpaid: no live view from seckill #{name}")
            continue
        wrong = [f"{k} {live.get(k)} (audit {a.get(k)})" for k in UNITS if live.get(k) != a.get(k)]
        if wrong:
            v.append(f"unpaid: the live view of seckill #{name} shows {', '.join(wrong)}")
    return v
