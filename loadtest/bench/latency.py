"""Latency without coordinated omission: the order latency at fixed offered loads below
saturation, 25/50/75% of what the strategy's throughput cell reached in the same run, with VUs to
spare so that k6 sends every arrival. A point where k6 still dropped arrivals fell back to a closed
loop: its percentiles ignore requests never sent, so it is flagged, not quoted.

This module plans the points and judges them; `cells.run_cell` runs them.
"""

from __future__ import annotations

from .cells import CellResult, CellSpec
from .settings import THROUGHPUT_USERS


def latency_vus(rate: int) -> tuple[int, int]:
    """(pre-allocated, maximum) VUs for an offered `rate`: 250 ms of answers up front and room for
    a full second of them, far above a service that keeps up. k6 drops the arrivals that come
    while it is still starting a VU beyond the pre-allocated ones (a first try with 100 ms up
    front dropped a few at 75% load with 34 VUs in use), so the pre-allocation is generous."""
    return max(20, rate // 4), max(50, rate)


def point_spec(tp: CellResult, rate: int, duration_s: int, fraction: float | None = None) -> CellSpec:
    """A point of `tp`'s strategy offered `rate` arrivals/s on a fresh sale whose stock outlasts
    the load (at most 2 units per arrival); its fraction is the share of `tp`'s orders/s it was
    planned as, else the share the rate comes to."""
    pre, most = latency_vus(rate)
    return CellSpec(strategy=tp.strategy, shards=tp.shards, kind="latency", total=rate * duration_s * 2,
                    users=THROUGHPUT_USERS, rate=rate, duration_s=duration_s, vus_limit=most, pre_vus=pre,
                    fraction=fraction if fraction is not None else rate / tp.orders_per_sec)


def latency_specs(tp: CellResult, fractions: tuple[float, ...], duration_s: int) -> list[CellSpec]:
    """The points of one strategy: each fraction of its throughput cell's orders/s."""
    return [point_spec(tp, max(1, round(f * tp.orders_per_sec)), duration_s, f) for f in fractions]


def server_us_per_order(cell: CellResult) -> dict[str, float] | None:
    """Server CPU per order of a point, µs by component (seckill, postgres, redis, total): each
    process group's share of k6's whole run (the sale's setup and the teardown audit included)
    over the orders it made. None without a CPU profile or an order."""
    profile, wall = cell.cpu_profile, cell.k6_wall_s
    if not profile or not cell.orders or not wall:
        return None
    cost = {g: profile.get(g, 0.0) / 100 * wall * 1e6 / cell.orders for g in ("seckill", "postgres", "redis")}
    cost["total"] = sum(cost.values())
    return cost


def point_flag(cell: CellResult) -> str | None:
    """Why a latency point cannot be quoted, or None when it can."""
    if cell.dropped_iterations:
        return f"{cell.dropped_iterations} arrivals dropped (open model lost)"
    if cell.p99_ms is None:
        return "no accepted order"
    if cell.errors:
        return f"{cell.errors} unexpected answers"
    return None
