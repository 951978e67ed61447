"""The disk's flush floor, measured for real on a temporary directory."""

from bench.disk import STALL_MS, flush_floor, percentile


def test_the_flush_floor_times_real_flushes_and_leaves_no_file(tmp_path):
    floor = flush_floor(tmp_path, 0.3)

    assert floor["flushes"] > 0
    assert 0 < floor["p50_ms"] <= floor["p99_ms"] <= floor["p999_ms"] <= floor["max_ms"]
    assert floor["stall_ms"] == STALL_MS
    assert (floor["stalls"] == 0) == (floor["stalled_ms"] == 0)
    assert list(tmp_path.iterdir()) == []


def test_percentiles_are_nearest_rank():
    ms = [float(n) for n in range(1, 101)]

    assert (percentile(ms, 0.5), percentile(ms, 0.99), percentile(ms, 0.999)) == (51.0, 100.0, 100.0)
