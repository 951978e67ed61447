"""The result of one run (`RunResult`), its JSON form, and where the files go: one `latest.json`
plus the last run's timestamped copy in loadtest/results (older timestamped files are deleted)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .capacity import WrkResult
from .cells import CellResult
from .targets import Target
from .unpaid import UnpaidResult

# 2: cells as flat objects with `cell` in mission/throughput/latency, `latency`, acked checks; 3: `capacity`;
# 4: `lifecycle` (the smoke's unpaid-buyers sale, unpaid.py); 5: `service_peak_rss_mib`
SCHEMA = 5
_TIMESTAMPED = re.compile(r"^\d{8}T\d{6}Z\.json$")


@dataclass
class RunResult:
    mode: str
    started_at: str
    run_id: str
    git: dict
    machine: dict
    settings: dict
    files: dict
    ceilings: dict = field(default_factory=dict)
    strategies: list[CellResult] = field(default_factory=list)
    latency: list[CellResult] = field(default_factory=list)
    capacity: list[WrkResult] = field(default_factory=list)  # the wrk cells
    lifecycle: UnpaidResult | None = None  # smoke: the sale where a share of buyers never pay
    lockkit: dict = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    service_logs: dict = field(default_factory=dict)
    # seckill-N -> its peak resident set over the run in MiB (memory.py), None if unreadable
    service_peak_rss_mib: dict = field(default_factory=dict)
    finished_at: str | None = None
    duration_s: float = 0.0
    kept_sales: str | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict:
        out = {"schema": SCHEMA}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name in ("strategies", "latency", "capacity"):
                out[name] = [c.to_json() for c in value]
            elif name == "lifecycle":
                out[name] = None if value is None else value.to_json()
            elif name == "targets":
                out[name] = [asdict(t) for t in value]
            else:
                out[name] = value
        out["ok"] = self.ok
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"


def stale_results(names: list[str], keep: str) -> list[str]:
    """The timestamped result files (`<UTC>.json`) other than `keep`: a run keeps only its own."""
    return sorted(n for n in names if _TIMESTAMPED.match(n) and n != keep)


def prune_results(results: Path, keep: str) -> list[str]:
    removed = stale_results([p.name for p in results.iterdir()], keep)
    for name in removed:
        (results / name).unlink(missing_ok=True)
    return removed
