"""PASS/MISS targets from cells, ceilings and the lock section."""

from bench.locks import medians
from bench.targets import evaluate_targets, times
from factories import cell, control


def by_id(targets):
    return {t.id: t for t in targets}


def test_owned_shards_is_judged_on_the_throughput_cells_when_they_ran():
    cells = [cell("owned-shards", kind="throughput", orders_per_sec=2000.0), cell("db-atomic", kind="throughput", orders_per_sec=900.0),
             cell("owned-shards", orders_per_sec=500.0), cell("db-atomic", orders_per_sec=450.0)]

    t = by_id(evaluate_targets(cells, {}, {}, smoke=False))["owned_vs_db_atomic"]

    assert t.status == "PASS"
    assert t.detail.startswith("throughput cells: 2000 / 900 orders/s = x2.22; mission cells: 500 / 450")


def test_owned_shards_below_twice_db_atomic_misses_and_says_where_the_cpu_went():
    owned = cell("owned-shards", kind="throughput", orders_per_sec=1000.0,
                 cpu_profile={"busy": 190.0, "cores": 2, "seckill": 60, "postgres": 70, "k6": 50, "redis": 5})
    cells = [owned, cell("db-atomic", kind="throughput", orders_per_sec=900.0)]

    t = by_id(evaluate_targets(cells, {}, {}, smoke=False))["owned_vs_db_atomic"]

    assert t.status == "MISS"
    assert "190% busy of 200%" in t.detail


def test_the_control_that_did_not_oversell_misses():
    targets = by_id(evaluate_targets([control(oversold=0, k6_exit=0), cell()], {}, {}, smoke=True))

    assert targets["none_oversells"].status == "MISS"
    assert targets["no_oversell"].status == "PASS"


def test_an_oversell_outside_the_control_misses():
    targets = by_id(evaluate_targets([control(), cell("redis-lock", audit={"oversold": 4})], {}, {}, smoke=True))

    assert targets["no_oversell"].status == "MISS"
    assert targets["no_oversell"].detail == "redis-lock/20: oversold=4 stranded=0"
    assert targets["none_oversells"].status == "PASS"


def test_lost_acknowledgements_miss_and_a_clean_run_counts_them():
    clean = by_id(evaluate_targets([cell(acked=10), cell("owned-shards", acked=5)], {}, {}, smoke=True))
    lost = by_id(evaluate_targets([cell("redis-gate", acked=10, acked_missing=3)], {}, {}, smoke=True))

    assert (clean["no_lost_acks"].status, clean["no_lost_acks"].detail) == ("PASS", "15 acknowledged orders, all in the orders table")
    assert (lost["no_lost_acks"].status, lost["no_lost_acks"].detail) == ("MISS", "redis-gate/20: 3 of 10 missing")


def test_the_targets_no_longer_mention_duplicates():
    # Zero by construction of the unique index: a check that cannot fail is not reported.
    targets = evaluate_targets([cell()], {}, {}, smoke=True)

    assert not any("duplicate" in t.target for t in targets)


def test_sharded_fenced_against_pg_order_tps():
    cells = [cell("sharded-fenced", 1, orders_per_sec=300.0), cell("sharded-fenced", 20, orders_per_sec=1200.0)]

    targets = by_id(evaluate_targets(cells, {"pg": {"pg_order_tps": 2500.0}}, {}, smoke=False))

    assert targets["fenced_shard_scaling"].status == "PASS"
    assert (targets["fenced_vs_pg"].status, targets["fenced_vs_pg"].detail) == ("MISS", "1200 orders/s = 48% of 2500 tps")


def test_lock_targets_without_data_miss():
    targets = by_id(evaluate_targets([], {}, {}, smoke=True))

    assert targets["lockkit_vs_redis"].detail == "no data"
    assert targets["lockkit_vs_peers"].detail == "peers not run (smoke mode)"


def _lock_section(lockkit: dict[int, tuple[float, float]], rslock: dict[int, tuple[float, float]]) -> dict:
    """A lock section with lockkit's and rslock's uncontended runs: C -> (pairs/s, Redis CPU µs/pair)."""
    def row(c, pps, cpu, **extra):
        return {"mode": "uncontended", "concurrency": c, "pairs_per_sec": pps, "redis_cpu_us_per_pair": cpu, **extra}
    return {"lockctl": [row(c, *v) for c, v in lockkit.items()],
            "peers": [row(c, *v, library="rslock") for c, v in rslock.items()]}


def test_lockkit_against_rslock_passes_within_the_bounds():
    lk = _lock_section({16: (40000.0, 15.0), 64: (56000.0, 14.0)}, {16: (48000.0, 12.0), 64: (70000.0, 10.0)})

    targets = by_id(evaluate_targets([], {}, lk, smoke=False))

    assert targets["lockkit_cpu_vs_rslock"].status == "PASS"
    assert targets["lockkit_cpu_vs_rslock"].detail == "C=16: 15.0 / 12.0 µs = x1.25; C=64: 14.0 / 10.0 µs = x1.40 (one run each)"
    assert targets["lockkit_rate_vs_rslock"].status == "PASS"


def test_lockkit_against_rslock_uses_the_medians_of_the_alternating_runs_when_there_are_some():
    def runs(*pairs_per_sec):
        rows = [{"pairs_per_sec": p, "redis_cpu_us_per_pair": 10.0, "p99_us": 300} for p in pairs_per_sec]
        return {"runs": rows, "median": medians(rows + [{"error": "exit 1"}])}
    # One run each (the tables) says x0.5; the alternating rounds say x0.9 at both concurrencies.
    lk = _lock_section({16: (40000.0, 10.0), 64: (40000.0, 10.0)}, {16: (80000.0, 10.0), 64: (80000.0, 10.0)})
    lk["head_to_head"] = {str(c): {"lockkit": runs(70000.0, 90000.0, 95000.0), "rslock": runs(100000.0, 110000.0, 60000.0)}
                          for c in (16, 64)}

    rate = by_id(evaluate_targets([], {}, lk, smoke=False))["lockkit_rate_vs_rslock"]

    assert rate.status == "PASS"
    assert rate.detail.startswith("C=16: 90000.0 / 100000.0 pairs/s = x0.90")
    assert rate.detail.endswith("(medians of 3 alternating runs each)")


def test_the_rate_against_rslock_says_where_each_sides_pairs_go():
    def runs(pairs_per_sec, client):
        rows = [{"pairs_per_sec": pairs_per_sec, "redis_cpu_us_per_pair": 10.0, "client_cpu_us_per_pair": client, "p99_us": 300}]
        return {"runs": rows, "median": medians(rows)}
    lk = _lock_section({}, {})
    lk["head_to_head"] = {"16": {"lockkit": runs(50000.0, 17.1), "rslock": runs(70000.0, 12.5)},
                          "64": {"lockkit": runs(80000.0, 11.0), "rslock": runs(85000.0, 10.0)}}

    targets = by_id(evaluate_targets([], {}, lk, smoke=False))

    assert targets["lockkit_rate_vs_rslock"].detail.startswith(
        "C=16: 50000.0 / 70000.0 pairs/s = x0.71 (client CPU 17.1 / 12.5 µs per pair); "
        "C=64: 80000.0 / 85000.0 pairs/s = x0.94 (client CPU 11.0 / 10.0 µs per pair)")
    assert "client" not in targets["lockkit_cpu_vs_rslock"].detail, "the Redis CPU target is about Redis alone"


def test_lockkit_against_rslock_misses_on_either_concurrency_or_missing_data():
    slow = _lock_section({16: (40000.0, 15.0), 64: (50000.0, 16.0)}, {16: (48000.0, 12.0), 64: (70000.0, 10.0)})
    missing = _lock_section({16: (40000.0, 15.0)}, {16: (48000.0, 12.0), 64: (70000.0, 10.0)})

    targets = by_id(evaluate_targets([], {}, slow, smoke=False))
    none = by_id(evaluate_targets([], {}, missing, smoke=False))

    assert targets["lockkit_cpu_vs_rslock"].status == "MISS"
    assert targets["lockkit_rate_vs_rslock"].status == "MISS"
    assert targets["lockkit_rate_vs_rslock"].detail.endswith("C=64: 50000.0 / 70000.0 pairs/s = x0.71 (one run each)")
    assert (none["lockkit_cpu_vs_rslock"].status, none["lockkit_cpu_vs_rslock"].detail.split("; ")[1]) == ("MISS", "C=64: no data (one run each)")


def point(fraction: float, rate: int, **fields):
    """An owned-shards latency point that made 20 000 orders in a 10 s k6 run."""
    return cell("owned-shards", kind="latency", fraction=fraction, rate=rate, orders=20_000, k6_wall_s=10.0, **fields)


def test_the_moderate_load_cost_is_the_servers_cpu_per_order_of_the_fixed_rate_point():
    # 20 + 16 + 1 = 37% of a core for 10 s over 20 000 orders: 185 µs per order.
    cheap = point(0.6, 2000, cpu_profile={"seckill": 20.0, "postgres": 16.0, "redis": 1.0, "k6": 60.0})
    # 30 + 20 + 1 = 51%: 255 µs.
    costly = point(0.6, 2000, cpu_profile={"seckill": 30.0, "postgres": 20.0, "redis": 1.0, "k6": 60.0})

    passed = by_id(evaluate_targets([], {}, {}, smoke=False, points=[cheap]))["moderate_owned_cpu"]
    missed = by_id(evaluate_targets([], {}, {}, smoke=False, points=[costly]))["moderate_owned_cpu"]

    assert (passed.status, missed.status) == ("PASS", "MISS")
    assert passed.detail.startswith("185 µs per order (seckill 100 + PostgreSQL 80 + Redis 5)")


def test_the_moderate_load_cost_splits_postgresqls_share_into_the_cost_of_a_commit_and_the_orders_sharing_it():
    # PostgreSQL: 20% of a core for 10 s over 20 000 orders is 100 µs per order; 1250 commits.
    costly = point(0.6, 2000, pg_commits_per_order=0.0625,
                   cpu_profile={"seckill": 30.0, "postgres": 20.0, "redis": 1.0, "k6": 60.0})

    detail = by_id(evaluate_targets([], {}, {}, smoke=False, points=[costly]))["moderate_owned_cpu"].detail

    assert "20000 orders; PostgreSQL 1600 µs per commit x 0.062 commits per order (about 16 orders per commit)" in detail
    uncounted = point(0.6, 2000, cpu_profile={"seckill": 30.0, "postgres": 20.0, "redis": 1.0, "k6": 60.0})
    assert "per commit" not in by_id(evaluate_targets([], {}, {}, smoke=False, points=[uncounted]))["moderate_owned_cpu"].detail


def test_a_ratio_shows_the_decimals_that_keep_it_on_its_side_of_the_target():
    assert times(20590 / 13770, lambda v: v >= 1.5) == "x1.495"
    assert times(2.004, lambda v: v >= 2.0) == "x2.00"
    assert times(1.9996, lambda v: v >= 2.0) == "x1.9996"
    assert times(1.5049, lambda v: v <= 1.5) == "x1.505"
    assert times(4.2, lambda v: v >= 4.0) == "x4.20"


def test_the_moderate_load_cost_names_the_http_floor_at_that_rate_when_it_was_measured():
    costly = point(0.6, 2000, cpu_profile={"seckill": 30.0, "postgres": 20.0, "redis": 1.0, "k6": 60.0})
    floor = {"http_moderate": {"seckill_us_per_request": 61.4, "ok": 20_000}}

    detail = by_id(evaluate_targets([], floor, {}, smoke=False, points=[costly]))["moderate_owned_cpu"].detail

    assert detail.endswith("; HTTP floor at this rate: seckill 61 µs per GET /healthz (k6, same rate and VU pool, "
                           "20000 requests)")
    unmeasured = {"http_moderate": {"error": "k6 healthz run left no summary"}}
    assert "floor" not in by_id(evaluate_targets([], unmeasured, {}, smoke=False, points=[costly]))["moderate_owned_cpu"].detail


def test_the_moderate_load_cost_is_the_median_round_and_names_every_round():
    # 185, 255 and 205 µs per order (see above: 37% and 51% of a core; 41% is 205 µs).
    rounds = [point(0.6, 2000, round_no=1, cpu_profile={"seckill": 20.0, "postgres": 16.0, "redis": 1.0}),
              point(0.6, 2000, round_no=2, cpu_profile={"seckill": 30.0, "postgres": 20.0, "redis": 1.0}),
              point(0.6, 2000, round_no=3, cpu_profile={"seckill": 24.0, "postgres": 16.0, "redis": 1.0}),
              point(0.6, 2000, round_no=4, cpu_profile={"seckill": 1.0}, dropped_iterations=40)]

    target = by_id(evaluate_targets([], {}, {}, smoke=False, points=rounds))["moderate_owned_cpu"]

    assert target.status == "MISS"
    assert target.detail.startswith("205 µs per order (seckill 120 + PostgreSQL 80 + Redis 5)")
    assert ("; the median of 4 rounds (round 3; µs per order by round: 185, 255, 205, 40 arrivals dropped "
            "(open model lost))") in target.detail


def test_the_p99_target_reads_the_half_load_point_and_refuses_one_that_dropped_arrivals():
    quick, slow = point(0.5, 1700, p99_ms=24.0), point(0.5, 1700, p99_ms=31.0)
    dropped = point(0.5, 1700, p99_ms=10.0, dropped_iterations=12)

    status = [by_id(evaluate_targets([], {}, {}, smoke=False, points=[p]))["latency_owned_p99"].status
              for p in (quick, slow, dropped)]

    assert status == ["PASS", "MISS", "MISS"]


def test_the_p99_target_quotes_the_disks_flush_floor_when_it_was_measured():
    slow = point(0.5, 1700, p99_ms=58.0)
    floor = {"disk_flush": {"seconds": 10, "write_bytes": 8192, "flushes": 4000, "p50_ms": 0.21, "p99_ms": 0.45,
                            "p999_ms": 4.8, "max_ms": 201.7, "stall_ms": 30.0, "stalls": 3, "stalled_ms": 320.5}}

    detail = by_id(evaluate_targets([], floor, {}, smoke=False, points=[slow]))["latency_owned_p99"].detail

    assert detail.endswith("; the disk's flush floor in this run: 4000 flushes of 8 KB (write + fdatasync) in 10 s "
                           "with the servers idle: p50 0.21 ms, p99 0.45 ms, p99.9 4.8 ms, max 201.7 ms; 3 over 30 ms, "
                           "320.5 ms in all")
    assert "flush" not in by_id(evaluate_targets([], {}, {}, smoke=False, points=[slow]))["latency_owned_p99"].detail


def test_without_an_owned_point_there_is_no_latency_target_and_smoke_has_none():
    assert "moderate_owned_cpu" not in by_id(evaluate_targets([], {}, {}, smoke=False, points=[]))
    assert "latency_owned_p99" not in by_id(evaluate_targets([], {}, {}, smoke=True, points=[point(0.5, 1700)]))


def test_every_instance_peaking_under_the_bound_passes_and_each_is_listed():
    t = by_id(evaluate_targets([], {}, {}, smoke=True, rss={"seckill-2": 58.4, "seckill-1": 61.94}))["service_rss"]

    assert t.status == "PASS"
    assert t.detail == "seckill-1 61.9 MiB, seckill-2 58.4 MiB"


def test_one_instance_at_the_bound_misses():
    t = by_id(evaluate_targets([], {}, {}, smoke=False, rss={"seckill-1": 40.0, "seckill-2": 64.0}))["service_rss"]

    assert t.status == "MISS"


def test_a_peak_that_could_not_be_read_misses_and_without_instances_there_is_no_rss_target():
    t = by_id(evaluate_targets([], {}, {}, smoke=False, rss={"seckill-1": 40.0, "seckill-2": None}))["service_rss"]

    assert (t.status, t.detail) == ("MISS", "not read for seckill-2; seckill-1 40.0 MiB")
    assert "service_rss" not in by_id(evaluate_targets([], {}, {}, smoke=False))
