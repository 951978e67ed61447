"""The READMEs' generated tables: written between their markers from a results file, and a README
left behind by a newer run is caught (the check `make test` relies on)."""

import json
from pathlib import Path

import pytest

from bench import readme

ROOT = Path(__file__).resolve().parents[3]

BENCH = {
    "started_at": "2026-12-02T10:00:00+00:00",
    "git": {"short": "abc1234", "dirty": False},
    "machine": {"nproc": 2, "cpu_model": "AMD EPYC", "redis_server": "7.0.15", "postgres_server": "15.18 (Debian)"},
    "capacity": [
        {"kind": "healthz", "strategy": None, "decided_per_sec": 48000.0, "orders_per_sec": 0.0, "p99_ms": 6.5,
         "server_5xx": 0, "busy_503": 0, "cpu_us_per_order": None,
         "cpu_us_per_request": {"seckill": 25.0, "postgres": 1.0, "redis": 0.2, "total": 26.2}},
        {"kind": "capacity", "strategy": "owned-shards", "decided_per_sec": 8000.0, "orders_per_sec": 7589.0,
         "p99_ms": 30.1, "server_5xx": 0, "busy_503": 3,
         "cpu_us_per_order": {"seckill": 66.0, "postgres": 129.0, "redis": 3.0, "total": 198.0}},
        {"kind": "capacity", "strategy": "db-atomic", "decided_per_sec": 2000.0, "orders_per_sec": 1900.0,
         "p99_ms": 40.0, "server_5xx": 0, "busy_503": 0, "represents": 0,
         "cpu_us_per_order": {"seckill": 200.0, "postgres": 500.0, "redis": 3.0, "total": 703.0}},
        {"kind": "capacity", "strategy": "db-atomic", "decided_per_sec": 2500.0, "orders_per_sec": 2400.0,
         "p99_ms": 35.0, "server_5xx": 0, "busy_503": 0, "represents": 3, "connections": 128,
         "cpu_us_per_order": {"seckill": 210.0, "postgres": 550.0, "redis": 2.0, "total": 762.0}},
    ],
    "service_peak_rss_mib": {"seckill-2": 58.25, "seckill-1": 61.94},
    "lockkit": {"lockctl": [{"concurrency": 16, "mode": "uncontended", "pairs_per_sec": 31374.0,
                             "redis_cpu_us_per_pair": 31.1, "p99_us": 922}],
                "peers": []},
}
CHAOS = {"started_at": "2026-12-01T20:03:21Z", "commit": "2644d63abcd", "mode": "full", "passed": True,
         "scenarios": [{"scenario": "pause", "strategy": "owned-shards", "passed": True, "acknowledged": 41654,
                        "lost": 0, "oversold": 0, "duplicates": 0}]}


def readme_tree(tmp_path: Path, results: dict[str, dict]) -> Path:
    """A project root with both READMEs' markers and the given results files."""
    for name in ("README.md", "loadtest/README.md"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# title\n\n<!-- generated: bench (make bench writes this; do not edit) -->\nold\n"
                        "<!-- end: bench -->\n\n<!-- generated: chaos (make chaos writes this; do not edit) -->\n"
                        "<!-- end: chaos -->\nafter\n")
    (tmp_path / "loadtest" / "results").mkdir(parents=True)
    for file, res in results.items():
        (tmp_path / "loadtest" / "results" / file).write_text(json.dumps(res))
    return tmp_path


def test_a_written_table_names_its_run_and_keeps_the_text_around_it(tmp_path):
    root = readme_tree(tmp_path, {"latest.json": BENCH, "chaos-latest.json": CHAOS})
    assert readme.write_blocks("bench", BENCH, root) == ["README.md", "loadtest/README.md"]
    readme.write_blocks("chaos", CHAOS, root)
    text = (root / "README.md").read_text()
    assert "\nold\n" not in text and text.startswith("# title\n") and text.endswith("after\n")
    assert "<!-- run: 2026-12-02T10:00:00+00:00 abc1234 -->" in text
    assert "| capacity | `owned-shards` | 7589 orders | 198 (66 + 129 + 3); 3 answered 5xx | 30.1 |" in text
    assert "| capacity (median of 3 runs, 128 connections) | `db-atomic` | 2400 orders | 762 (210 + 550 + 2) | 35.0 |" in text
    assert "1900 orders" not in text, "a round other than the median run stays in latest.md"
    assert "latest.md). Peak RSS of each seckill instance over the run: 61.9 and 58.2 MiB.\n" in text
    assert "| `pause` | `owned-shards` | 41 654 | 0 | 0 | 0 | passed |" in text
    assert readme.stale_blocks(root) == []


def test_the_table_shows_the_median_capacity_runs_in_the_strategies_order_whatever_round_they_came_from():
    def cap(strategy, represents):
        return {"kind": "capacity", "strategy": strategy, "represents": represents}

    cells = [{"kind": "healthz", "strategy": None}, cap("owned-shards", 0), cap("redis-gate", 3), cap("db-atomic", 0),
             cap("db-atomic", 3), cap("owned-shards", 3), cap("redis-gate", 0), {"kind": "storm", "strategy": "db-atomic"},
             {"kind": "storm", "strategy": "owned-shards"}]

    shown = [(c["kind"], c["strategy"]) for c in readme.table_cells(cells)]

    assert shown == [("healthz", None), ("capacity", "owned-shards"), ("capacity", "db-atomic"), ("capacity", "redis-gate"),
                     ("storm", "owned-shards"), ("storm", "db-atomic")]


def test_a_readme_older_than_its_results_file_is_stale(tmp_path):
    root = readme_tree(tmp_path, {"latest.json": BENCH, "chaos-latest.json": CHAOS})
    readme.write_blocks("bench", BENCH, root)
    readme.write_blocks("chaos", CHAOS, root)
    newer = dict(BENCH, started_at="2026-12-03T10:00:00+00:00", git={"short": "def5678"})
    (root / "loadtest" / "results" / "latest.json").write_text(json.dumps(newer))
    stale = readme.stale_blocks(root)
    assert len(stale) == 2 and all("bench table" in s and "def5678" in s for s in stale)


def test_a_readme_without_its_block_is_stale_and_cannot_be_written(tmp_path):
    root = readme_tree(tmp_path, {"chaos-latest.json": CHAOS})
    (root / "README.md").write_text("# no markers\n")
    assert any(s.startswith("README.md: the chaos table") for s in readme.stale_blocks(root))
    with pytest.raises(ValueError):
        readme.write_blocks("chaos", CHAOS, root)


def test_the_project_readmes_show_the_last_runs():
    """The check itself: make bench and make chaos rewrite these; a hand edit or a run whose
    tables were not written shows here."""
    assert readme.stale_blocks(ROOT) == []


@pytest.mark.parametrize("path", ["README.md", "loadtest/README.md", "lockkit/README.md"])
def test_a_readme_reads_in_a_minute(path):
    """120 lines at most, generated tables included: prose that outgrows it belongs in docs/."""
    lines = (ROOT / path).read_text().count("\n")
    assert lines <= 120, f"{path} has {lines} lines; move the prose to docs/"
