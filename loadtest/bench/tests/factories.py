"""Cells and runs as the tests need them: every field a sensible clean default, overridable."""

from __future__ import annotations

from bench.capacity import WrkResult, WrkSpec
from bench.cells import CellResult, CellSpec
from bench.result import RunResult

CLEAN_AUDIT = {"total": 300, "sold": 300, "remaining": 0, "oversold": 0, "duplicates": 0, "stranded": 0,
               "consistent": True, "fence_rejections": 0, "users_over_limit": 0}


def cell(strategy: str = "db-atomic", shards: int = 20, kind: str = "mission", fraction: float | None = None,
         rate: int = 4000, round_no: int = 0, **fields) -> CellResult:
    spec = CellSpec(strategy=strategy, shards=shards, kind=kind, total=300, users=10000, rate=rate, duration_s=3,
                    vus_limit=200, pre_vus=40, fraction=fraction, round_no=round_no)
    audit = {**CLEAN_AUDIT, **fields.pop("audit", {})}
    defaults = dict(sku=spec.sku("r1"), k6_exit=0, k6_verdict="pass", audit=audit, oversold=audit["oversold"],
                    stranded=audit["stranded"], sold=audit["sold"], orders=200, orders_per_sec=100.0, acked=200,
                    acked_missing=0, p50_ms=5.0, p99_ms=20.0)
    return CellResult(spec=spec, **{**defaults, **fields})


def control(oversold: int = 12, k6_exit: int = 99, **fields) -> CellResult:
    """The `none` cell as it should look: oversold, k6 failed on the oversell thresholds only."""
    defaults = dict(k6_verdict="fail" if k6_exit else "pass",
                    failed_thresholds=["audit_oversold", "units_accepted"] if k6_exit else [])
    return cell("none", audit={"oversold": oversold, "sold": 300 + oversold}, k6_exit=k6_exit, **{**defaults, **fields})


def run(**fields) -> RunResult:
    settings = {"total": 300, "rate": 4000, "duration_s": 3, "max_vus": 200, "per_user_limit": 2, "qty_mix": "1:0.7,2:0.3",
                "replay_fraction": 0.05, "invalid_fraction": 0.02, "latency_fractions": [0.25, 0.5, 0.75],
                "latency_duration_s": 10}
    defaults = dict(mode="full", started_at="2026-12-01T00:00:00+00:00", run_id="r1",
                    git={"short": "abc1234", "dirty": False, "untracked": []},
                    machine={"nproc": 2, "loadavg_start": [0.5, 0.5, 0.5]}, settings=settings,
                    files={"json": "loadtest/results/x.json", "run_dir": ".run/bench/x"},
                    lockkit={"duration_ms": 500})
    return RunResult(**{**defaults, **fields})


def wrk_cell(strategy: str | None = "owned-shards", kind: str = "capacity", spec: WrkSpec | None = None, **fields) -> WrkResult:
    """A clean wrk cell: every request answered 201, one order each, a clean audit."""
    spec = spec or WrkSpec(kind, strategy, duration_s=8)
    defaults = dict(sku=spec.sku("r1"), wrk_exit=[0, 0], wrk_logs=["a.log", "b.log"], load_s=8.0, requests=8000,
                    answers={"201": 8000}, ok_2xx=8000, created=8000, orders=8000, orders_in_load=8000, orders_per_sec=1000.0,
                    decided_per_sec=1000.0, duplicate_keys=0, audit=dict(CLEAN_AUDIT), p50_ms=5.0, p99_ms=20.0,
                    cpu_us_per_order={"seckill": 30.0, "postgres": 50.0, "redis": 2.0, "total": 82.0},
                    cpu_us_per_request={"seckill": 30.0, "postgres": 50.0, "redis": 2.0, "total": 82.0},
                    wrk_us_per_request=4.0)
    return WrkResult(spec=spec, **{**defaults, **fields})
