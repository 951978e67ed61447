"""Latency without coordinated omission: the order latency at fixed offered loads below
saturation, 25/50/75% of what the strategy's throughput cell reached in the same run, with VUs to
spare so that k6 sends every arrival. A point where k6 still dropped arrivals fell back to a closed
loop: its percentiles ignore requests never sent, so it is flagged, not quoted.

This module plans the points and judges them; `cells.run_cell` runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .cells import CellResult, CellSpec
from .settings import MODERATE_RATE, THROUGHPUT_USERS


def latency_vus(rate: int) -> tuple[int, int]:
    """(pre-allocated, maximum) VUs for an offered `rate`: 250 ms of answers up front and room for
    a full second of them, far above a service that keeps up. k6 drops the arrivals that come
    while it is still starting a VU beyond the pre-allocated ones (a first try with 100 ms up
    front dropped a few at 75% load with 34 VUs in use), so the pre-allocation is generous."""
    return max(20, rate // 4), max(50, rate)


def point_spec(tp: CellResult, rate: int, duration_s: int, fraction: float | None = None, round_no: int = 0) -> CellSpec:
    """A point of `tp`'s strategy offered `rate` arrivals/s on a fresh sale whose stock outlasts
    the load (at most 2 units per arrival); its fraction is the share of `tp`'s orders/s it was
    planned as, else the share the rate comes to. `round_no` numbers a point run in rounds."""
    pre, most = latency_vus(rate)
    return CellSpec(strategy=tp.strategy, shards=tp.shards, kind="latency", total=rate * duration_s * 2,
                    users=THROUGHPUT_USERS, rate=rate, duration_s=duration_s, vus_limit=most, pre_vus=pre,
                    fraction=fraction if fraction is not None else rate / tp.orders_per_sec, round_no=round_no)


def plan_points(throughput: dict[tuple[str, int], CellResult], strategies: list[tuple[str, int]],
                fractions: tuple[float, ...], duration_s: int, rounds: int) -> list[CellSpec]:
    """The latency points of `strategies` (each needs a throughput cell that sold), in run order.
    owned-shards (20 shards) has one more at the moderate rate, unless one of its shares already
    offers that rate. With more than one of `rounds`, its two target points (the moderate rate
    and half its throughput cell) run that many times, each round on its own sales, spread among
    the other points (`with_rounds`)."""
    points = [s for key in strategies if key in throughput and throughput[key].orders_per_sec > 0
              for s in latency_specs(throughput[key], fractions, duration_s)]
    owned = throughput.get(("owned-shards", 20))
    if owned is None or owned.orders_per_sec <= 0 or ("owned-shards", 20) not in strategies:
        return points
    offered = any(is_owned_target_point(s) and s.rate == MODERATE_RATE for s in points)
    if rounds <= 1:
        return points + ([] if offered else [point_spec(owned, MODERATE_RATE, duration_s)])
    half = [s for s in points if is_owned_target_point(s) and s.fraction == 0.5]
    groups = [[point_spec(owned, MODERATE_RATE, duration_s, round_no=r)] * (not offered)
              + [replace(s, round_no=r) for s in half] for r in range(1, rounds + 1)]
    return with_rounds([s for s in points if s not in half], groups)


def with_rounds(points: list[CellSpec], rounds: list[list[CellSpec]]) -> list[CellSpec]:
    """`points` with `rounds` (each round a group of points run together) spread among them: the
    first round before every point, the last after them all, the others in between at even
    steps, so that the rounds meet the box at different times of the run."""
    if len(rounds) <= 1:
        return points + [spec for group in rounds for spec in group]
    out = list(points)
    for i, group in reversed(list(enumerate(rounds))):
        at = round(i * len(points) / (len(rounds) - 1))
        out[at:at] = group
    return out


def is_owned_target_point(c: CellResult | CellSpec) -> bool:
    """Whether `c` is one of owned-shards' (20 shards) points its targets read."""
    return c.strategy == "owned-shards" and c.shards == 20


def moderate_points(points: list[CellResult]) -> list[CellResult]:
    """owned-shards' points at the moderate rate (20 shards), in run order: one, or its rounds."""
    return [c for c in points if is_owned_target_point(c) and c.spec.rate == MODERATE_RATE]


def half_points(points: list[CellResult]) -> list[CellResult]:
    """owned-shards' points at half its throughput cell (20 shards), in run order: one, or its
    rounds."""
    return [c for c in points if is_owned_target_point(c) and c.spec.fraction == 0.5]


def median_round(rounds: list[CellResult], measure: Callable[[CellResult], float | None]) -> CellResult | None:
    """Of `rounds` (one point's runs) that can be quoted (`point_flag`) and have a `measure`, the
    median by it (with an even number, the lower middle one); with none such, the first round,
    whose flag says why; None if the point did not run."""
    measured = sorted(((m, n, c) for n, c in enumerate(rounds)
                       if not point_flag(c) and (m := measure(c)) is not None), key=lambda t: t[:2])
    if measured:
        return measured[(len(measured) - 1) // 2][2]
    return rounds[0] if rounds else None


def server_us_total(cell: CellResult) -> float | None:
    """A point's server CPU per order in all (see `server_us_per_order`)."""
    cost = server_us_per_order(cell)
    return None if cost is None else cost["total"]


def moderate_median(points: list[CellResult]) -> CellResult | None:
    """The moderate point the cost target takes: its median round by server CPU per order."""
    return median_round(moderate_points(points), server_us_total)


def half_median(points: list[CellResult]) -> CellResult | None:
    """The half-load point the p99 target takes: its median round by p99."""
    return median_round(half_points(points), lambda c: c.p99_ms)


def medians(points: list[CellResult]) -> list[CellResult]:
    """The median rounds of the points run in rounds (the ones the targets take)."""
    return [m for m in (moderate_median(points), half_median(points)) if m is not None and m.spec.round_no]


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
