"""latest.md: the strategy table, the latency table, the lock backend table and provenance."""

from bench.report_md import backend_rows, latency_rows, markdown, provenance, strategy_rows
from factories import cell, control, run


def row_of(lines, first_cell):
    return next(line for line in lines if line.startswith(f"| {first_cell} |"))


def test_the_strategy_table_has_acked_missing_instead_of_duplicates():
    lines = strategy_rows(run(strategies=[cell("owned-shards", acked_missing=0)]))

    assert "acked missing" in lines[2] and "duplicates" not in lines[2]
    assert lines[2].count("|") == lines[3].count("|") == row_of(lines, "owned-shards").count("|")


def test_a_violating_cell_is_marked_in_the_table():
    bad = cell("redis-lock", audit={"oversold": 2}, violations=["redis-lock/20: audit oversold=2"])

    line = row_of(strategy_rows(run(strategies=[bad, control()])), "redis-lock")

    assert line.endswith("| **VIOLATION** |")
    assert row_of(strategy_rows(run(strategies=[control()])), "none").endswith("| fail (99) | ok |")


def test_a_latency_point_with_dropped_arrivals_is_flagged_not_valid():
    ok = cell("owned-shards", kind="latency", fraction=0.25, rate=500, p99_ms=12.5)
    dropped = cell("owned-shards", kind="latency", fraction=0.75, rate=1500, dropped_iterations=40)

    lines = latency_rows(run(latency=[ok, dropped]))

    assert "![p99 against offered load per strategy](latest-latency.svg)" in lines
    rows = [line for line in lines if line.startswith("| owned-shards |")]
    assert rows[0].endswith("| ok |") and "| 25% | 500 |" in rows[0] and "| 12.5 |" in rows[0]
    assert rows[1].endswith("| **NOT VALID**: 40 arrivals dropped (open model lost) |")


def test_the_rounds_of_the_moderate_point_are_listed_and_the_median_named():
    rounds = [cell("owned-shards", kind="latency", fraction=0.6, rate=2000, round_no=n, orders=20_000, k6_wall_s=10.0,
                   cpu_profile={"seckill": cpu}) for n, cpu in ((1, 40.0), (2, 20.0), (3, 30.0))]

    lines = latency_rows(run(latency=rounds, settings={**run().settings, "target_rounds": 3}))

    rows = [line for line in lines if line.startswith("| owned-shards |")]
    assert ["| 60%, round 3 (median) |" in r for r in rows] == [False, False, True]
    assert "| 60%, round 1 |" in rows[0]
    assert any("run in 3 rounds spread among the others" in line for line in lines)


def test_backends_that_did_not_run_say_why_and_the_others_show_p99():
    lk = {"duration_ms": 500, "pipeline": 16, "backends": {
        "redis": {"label": "one Redis", "kind": "redis", "nodes": ["127.0.0.1:6390"], "runs": [
            {"mode": "uncontended", "concurrency": 1, "pairs_per_sec": 9000.0, "p99_us": 310},
            {"mode": "contended", "concurrency": 16, "pairs_per_sec": 7000.0, "p99_us": 4100}]},
        "zk": {"label": "ZooKeeper", "kind": "zk", "nodes": [], "runs": [], "not_run": "ZOOKEEPER_URL unset"},
        "postgres": {"label": "PostgreSQL (lease table)", "kind": "postgres", "nodes": [], "runs": [],
                     "not_run": "lockctl: the PostgreSQL backend is not built yet"}}}

    lines = backend_rows(lk)

    assert row_of(lines, "**lockkit** one Redis").startswith("| **lockkit** one Redis | 9000 (p99 310) | - | - | 7000 (p99 4100) |")
    assert "not run (ZOOKEEPER_URL unset)" in row_of(lines, "**lockkit** ZooKeeper")
    assert "not run (lockctl: the PostgreSQL backend is not built yet)" in row_of(lines, "**lockkit** PostgreSQL (lease table)")
    assert len({line.count("|") for line in lines if line.startswith("|")}) == 1


def test_provenance_says_when_the_tree_was_not_the_commit():
    assert provenance(run()) == "Commit `abc1234`"
    assert provenance(run(git={"short": "abc1234", "dirty": True})).endswith("(dirty tree: uncommitted changes to tracked files)")
    assert provenance(run(git={"short": "abc1234", "dirty": False, "untracked": ["x.py"]})).endswith("(untracked files: x.py)")


def test_the_whole_report_renders_with_every_section():
    text = markdown(run(strategies=[control(), cell("owned-shards", kind="throughput")],
                        latency=[cell("owned-shards", kind="latency", fraction=0.5)]))

    for heading in ("## Strategies", "## Latency at fixed offered loads", "## Ceilings", "## Targets"):
        assert heading in text


def test_a_latency_strategy_without_a_throughput_cell_is_noted():
    settings = {**run().settings, "latency_cells": ["owned-shards/20", "redis-gate/20"]}

    text = markdown(run(settings=settings, latency=[cell("owned-shards", kind="latency", fraction=0.5)]))

    assert "- redis-gate/20: no latency points (no throughput cell of it ran" in text
    assert "- owned-shards/20: no latency points" not in text
