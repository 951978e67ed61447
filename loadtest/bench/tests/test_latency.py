from bench.latency import half_median, moderate_median, plan_points, with_rounds
from factories import cell


def moderate(round_no: int, cpu: float | None, **fields):
    """A moderate round: 10 s at 2000/s, 20 000 orders; `cpu` % of a core for seckill alone
    (10% of a core is 50 µs per order)."""
    profile = None if cpu is None else {"seckill": cpu, "postgres": 0.0, "redis": 0.0}
    return cell("owned-shards", kind="latency", fraction=0.6, rate=2000, round_no=round_no, orders=20_000,
                k6_wall_s=10.0, cpu_profile=profile, **fields)


def test_the_rounds_are_spread_first_between_and_last():
    rounds = [["m1", "h1"], ["m2", "h2"], ["m3", "h3"]]
    assert with_rounds(["25%", "75%"], rounds) == ["m1", "h1", "25%", "m2", "h2", "75%", "m3", "h3"]
    assert with_rounds(["25%", "50%", "75%"], [["m1"]]) == ["25%", "50%", "75%", "m1"]
    assert with_rounds([], [["m1"], ["m2"]]) == ["m1", "m2"]


def test_owned_shards_target_points_run_in_rounds_and_the_other_points_once():
    owned = cell("owned-shards", kind="throughput", orders_per_sec=3600.0)
    gate = cell("redis-gate", kind="throughput", orders_per_sec=2000.0)
    keys = [("owned-shards", 20), ("redis-gate", 20)]

    points = plan_points({k: c for k, c in zip(keys, (owned, gate))}, keys, (0.25, 0.5, 0.75), 10, 3)

    assert [(p.strategy, p.rate, p.round_no) for p in points] == [
        ("owned-shards", 2000, 1), ("owned-shards", 1800, 1), ("owned-shards", 900, 0), ("owned-shards", 2700, 0),
        ("owned-shards", 2000, 2), ("owned-shards", 1800, 2), ("redis-gate", 500, 0), ("redis-gate", 1000, 0),
        ("redis-gate", 1500, 0), ("owned-shards", 2000, 3), ("owned-shards", 1800, 3)]
    once = plan_points({keys[0]: owned}, keys[:1], (0.25, 0.5, 0.75), 10, 1)
    assert [(p.rate, p.round_no) for p in once] == [(900, 0), (1800, 0), (2700, 0), (2000, 0)]


def test_the_cost_target_takes_the_median_round_by_cost():
    rounds = [moderate(1, 50.0), moderate(2, 30.0), moderate(3, 40.0)]
    assert moderate_median(rounds).spec.round_no == 3
    # An even number of quotable rounds: the lower middle one.
    assert moderate_median(rounds[:2]).spec.round_no == 2


def test_a_round_that_cannot_be_quoted_takes_no_part_in_the_median():
    dropped = moderate(1, 10.0, dropped_iterations=300)
    unprofiled = moderate(2, None)
    assert moderate_median([dropped, unprofiled, moderate(3, 45.0)]).spec.round_no == 3
    # With none quotable, the first round stands, so that its flag says why.
    assert moderate_median([dropped, unprofiled]) is dropped
    assert moderate_median([cell("owned-shards", kind="latency", fraction=0.5, rate=1800)]) is None


def test_each_round_runs_on_its_own_sale():
    skus = {moderate(n, 40.0).spec.sku("r1") for n in (1, 2, 3)}
    assert len(skus) == 3


def test_the_p99_target_takes_the_half_load_point_s_median_round_by_p99():
    rounds = [cell("owned-shards", kind="latency", fraction=0.5, rate=1800, round_no=n, p99_ms=p)
              for n, p in ((1, 40.0), (2, 15.0), (3, 31.0))]
    assert half_median(rounds).spec.round_no == 3
