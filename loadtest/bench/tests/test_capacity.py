"""The wrk cells: wrk's output, answers and costs, the cell check, the storm's identical request
sequences (on a real wrk when one is installed), the targets and the table."""

import http.server
import shutil
import subprocess
import threading

import pytest

from bench.capacity import (WrkRun, WrkSpec, capacity_specs, check_wrk_cell, cpu_costs, mark_medians, order_args,
                            parse_wrk, read_orders, read_runs, representing)
from bench.cpu import group_cpu_s
from bench.report_md import capacity_rows, markdown
from bench.settings import CAPACITY_CONNECTIONS, CAPACITY_ROUNDS, CAPACITY_STRATEGIES, WRK_ORDERS, LoadModel
from bench.targets import capacity_targets, evaluate_targets
from factories import run, wrk_cell

MODEL = LoadModel(per_user_limit=2, max_per_order=2, qty_mix="1:0.7,2:0.3", replay_fraction=0.05, invalid_fraction=0.02)

WRK_OUTPUT = """Running 8s test @ http://127.0.0.1:40001
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     7.01ms    2.10ms  41.00ms   80.00%
  64000 requests in 8.00s, 20.00MB read
Requests/sec:   8000.00
wrk-result {"requests":64000,"duration_us":8000123,"bytes":20000000,"errors":{"connect":0,"read":0,"write":0,"status":1200,"timeout":3},"latency_us":{"p50":6800,"p90":9000,"p99":15000,"max":41000,"mean":7010.5},"answers":{"201":62000,"409":1000,"503":200,"409 user_limit_reached":1000,"503 busy":200}}
"""


def a_run(answers, requests=None, p50=5000, p99=20000, duration_s=8.0, **errors) -> WrkRun:
    return WrkRun(requests=requests if requests is not None else sum(v for k, v in answers.items() if k.isdigit()),
                  duration_s=duration_s, errors={"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0, **errors},
                  latency_us={"p50": p50, "p90": p99, "p99": p99, "max": p99, "mean": p50}, answers=answers)


def test_the_result_line_is_read_from_wrks_output():
    r = parse_wrk(WRK_OUTPUT)

    assert (r.requests, r.duration_s, r.errors["timeout"]) == (64000, 8.000123, 3)
    assert r.latency_us["p99"] == 15000
    assert r.answers["409 user_limit_reached"] == 1000


def test_output_without_a_result_line_is_none():
    assert parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n") is None
    assert parse_wrk("wrk-result {not json}\n") is None


def test_answers_of_both_instances_add_up_and_latency_is_the_worse_instance():
    res = wrk_cell(kind="storm", answers={}, requests=0, ok_2xx=0, created=0, wrk_logs=["a.log", "b.log"])
    first = a_run({"201": 700, "200": 200, "503": 50, "503 busy": 50, "500": 5, "500 internal": 5}, p99=30000)
    second = a_run({"201": 300, "200": 600, "409": 40, "409 sold_out": 40}, p50=9000, duration_s=7.5, timeout=7)

    read_runs(res, [first, second])

    assert (res.requests, res.ok_2xx, res.created, res.replayed) == (1895, 1800, 1000, 800)
    assert (res.client_4xx, res.busy_503, res.server_5xx, res.socket_errors) == (40, 50, 5, 7)
    assert (res.p50_ms, res.p99_ms, res.load_s) == (9.0, 30.0, 8.0)
    assert res.decided_per_sec == round((1000 + 800 + 40) / 8.0, 1)
    assert res.answers["503 busy"] == 50 and res.wrk_unparsed == []


def test_a_wrk_run_without_a_result_is_named():
    res = wrk_cell(wrk_logs=["a.log", "b.log"])

    read_runs(res, [a_run({"201": 10}), None])

    assert res.wrk_unparsed == ["b.log"]
    assert check_wrk_cell(res)[0].startswith("owned-shards/20 (capacity): wrk did not complete")


def test_cpu_per_order_by_component():
    cost = cpu_costs({"seckill": 0.8, "postgres": 1.2, "redis": 0.05, "k6": 9.0, "busy": 3.9}, 20000)

    assert cost == {"seckill": 40.0, "postgres": 60.0, "redis": 2.5, "total": 102.5}
    assert cpu_costs({"seckill": 1.0}, 0) is None


def test_group_cpu_counts_a_process_that_started_in_between_from_zero_and_a_reused_pid_as_new():
    before = {0: ("total", 1000), 10: ("seckill", 500), 11: ("postgres", 100), 12: ("bash", 50)}
    after = {0: ("total", 1400), 10: ("seckill", 600), 11: ("redis-server", 30), 13: ("postgres", 20), 12: ("bash", 90)}

    used = group_cpu_s(before, after)

    tick = 1 / __import__("bench.cpu", fromlist=["CLK_TCK"]).CLK_TCK
    assert used["seckill"] == pytest.approx(100 * tick)
    assert used["postgres"] == pytest.approx(20 * tick)
    assert used["redis"] == pytest.approx(30 * tick)
    assert used["busy"] == pytest.approx(400 * tick)


def test_a_pinned_group_counts_only_its_pids(monkeypatch):
    import bench.cpu as cpu

    monkeypatch.setattr(cpu, "_PINNED", {})
    before = {0: ("total", 1000), 20: ("redis-server", 100), 21: ("redis-server", 100)}
    after = {0: ("total", 1100), 20: ("redis-server", 130), 21: ("redis-server", 170)}

    cpu.pin("redis", [20])
    used = group_cpu_s(before, after)

    assert used["redis"] == pytest.approx(30 / cpu.CLK_TCK), "the lock servers' redis-server is not the service's"
    assert used["busy"] == pytest.approx(100 / cpu.CLK_TCK)


def test_a_clean_cell_has_no_violation_and_503s_are_not_one():
    assert check_wrk_cell(wrk_cell()) == []
    assert check_wrk_cell(wrk_cell(kind="storm", busy_503=900, answers={"201": 7100, "503": 900, "503 busy": 900})) == []


def test_5xx_other_than_503_is_a_violation_with_its_error_codes():
    bad = wrk_cell(kind="storm", server_5xx=12, answers={"201": 7988, "500": 12, "500 internal": 12})

    assert check_wrk_cell(bad) == ["owned-shards/20 (storm): 12 answers 5xx other than 503 (500 internal: 12)"]


def test_a_key_with_two_orders_is_a_violation():
    assert check_wrk_cell(wrk_cell(kind="storm", duplicate_keys=3)) == [
        "owned-shards/20 (storm): 3 Idempotency-Keys with more than one order"]


class FakeContext:
    """A cell context whose PostgreSQL answers the orders' count and sum, then no duplicate key."""

    def __init__(self, orders: int, units: int):
        self.pg = self
        self.answers = [[(orders, units)], []]

    def rows(self, _sql, _params):
        return self.answers.pop(0)


def test_the_rate_counts_the_orders_durable_when_the_load_ended_and_the_cost_all_of_them():
    gate = wrk_cell("redis-gate", load_s=8.0, orders_in_load=80000, drain_s=1.0)

    read_orders(gate, FakeContext(orders=90000, units=117000))

    assert (gate.orders_per_sec, gate.orders, gate.units, gate.duplicate_keys) == (10000.0, 90000, 117000, 0)


def test_more_201_answers_than_orders_is_a_lost_acknowledgement():
    lost = wrk_cell("redis-gate", created=8000, orders=7990, drain="409 {}")

    assert check_wrk_cell(lost) == ["redis-gate/20 (capacity): 8000 answers 201 but 7990 orders in the orders table "
                                    "(10 acknowledged orders missing); drain: 409 {}"]
    # Orders whose answer never reached wrk (it stopped mid-request) are no violation.
    assert check_wrk_cell(wrk_cell(created=7990, orders=8000)) == []


def test_a_byte_identical_retry_refused_as_a_reused_key_is_a_violation_in_the_storm():
    answers = {"201": 7990, "422": 10, "422 idempotency_key_reused": 10}

    assert check_wrk_cell(wrk_cell(kind="storm", answers=answers)) == [
        "owned-shards/20 (storm): 10 answers 422 idempotency_key_reused to byte-identical retries"]


def test_the_audit_must_be_clean_and_readable():
    oversold = wrk_cell(kind="hot-users", audit={"oversold": 0, "stranded": 0, "users_over_limit": 4, "consistent": True})
    unread = wrk_cell(audit=None, audit_error="status 503")

    assert check_wrk_cell(oversold) == ["owned-shards/20 (hot-users): audit users_over_limit=4"]
    assert check_wrk_cell(unread) == ["owned-shards/20 (capacity): audit unreadable (status 503)"]


def test_the_healthz_floor_needs_only_2xx_answers():
    floor = wrk_cell(None, kind="healthz", audit=None, duplicate_keys=None, orders=0, created=0)

    assert check_wrk_cell(floor) == []
    assert check_wrk_cell(wrk_cell(None, kind="healthz", audit=None, client_4xx=3)) == [
        "healthz floor: 3 answers >= 400 to GET /healthz"]


def test_the_storm_sends_both_instances_the_same_arguments_and_the_others_do_not():
    storm, cap = WrkSpec("storm", "owned-shards", 8), WrkSpec("capacity", "owned-shards", 8)

    assert order_args(storm, "s1", 1, MODEL) == order_args(storm, "s1", 2, MODEL)
    assert order_args(cap, "s1", 1, MODEL) != order_args(cap, "s1", 2, MODEL)
    assert order_args(cap, "s1", 1, MODEL)[-1] == "1:0.700000,2:1"
    assert order_args(WrkSpec("hot-users", "db-atomic", 8), "s1", 1, MODEL)[1] == "200"


def test_smoke_runs_only_the_owned_shards_storm_and_full_runs_every_kind():
    assert [(s.kind, s.strategy) for s in capacity_specs("smoke", 2)] == [("storm", "owned-shards")]
    full = capacity_specs("full", 8)
    assert full[0].kind == "healthz" and len(full) == 1 + 3 * CAPACITY_ROUNDS * len(CAPACITY_CONNECTIONS) + 6
    assert len({s.sku("r1") for s in full[1:]}) == len(full) - 1 and all(len(s.sku("123456abcd")) <= 64 for s in full)
    assert len({s.label for s in full}) == len(full)


def test_the_capacity_rounds_let_every_strategy_run_at_every_place_equally_often():
    runs = [s for s in capacity_specs("full", 8) if s.kind == "capacity"]
    n, levels = len(CAPACITY_STRATEGIES), len(CAPACITY_CONNECTIONS)
    strategies = runs[::levels]  # a strategy runs at every number of connections in a row

    places = {strategy: [i % n for i, s in enumerate(strategies) if s.strategy == strategy] for strategy in CAPACITY_STRATEGIES}

    assert all(sorted(p) == sorted(list(range(n)) * (CAPACITY_ROUNDS // n)) for p in places.values()), places
    assert [s.round_no for s in runs] == [r for r in range(1, CAPACITY_ROUNDS + 1) for _ in range(n * levels)]
    for strategy in CAPACITY_STRATEGIES:
        for r in range(1, CAPACITY_ROUNDS + 1):
            conns = [s.connections for s in runs if s.strategy == strategy and s.round_no == r]
            assert conns == list(CAPACITY_CONNECTIONS if r % 2 else CAPACITY_CONNECTIONS[::-1]), (strategy, r, conns)


def test_the_median_run_of_a_cell_stands_for_its_rounds_and_a_single_cell_for_itself():
    runs = [wrk_cell("owned-shards", orders_per_sec=r) for r in (14000.0, 9000.0, 12000.0)]
    single = wrk_cell("owned-shards", kind="storm")

    mark_medians(runs + [single])

    assert [c.represents for c in runs] == [0, 0, 3] and single.represents == 1
    assert [c.median for c in runs] == [False, False, True] and single.median
    assert representing(runs + [single]) == [runs[2], single]


def test_a_strategys_capacity_is_its_best_median_over_the_numbers_of_connections():
    def runs(strategy, conns, rates):
        return [wrk_cell(orders_per_sec=r, spec=WrkSpec("capacity", strategy, 8, connections=conns, round_no=n))
                for n, r in enumerate(rates, 1)]
    owned_64, owned_128 = runs("owned-shards", 64, (14000.0, 9000.0, 12000.0)), runs("owned-shards", 128, (13000.0, 16000.0, 12500.0))
    gate_64, gate_128 = runs("redis-gate", 64, (10000.0, 11000.0, 9000.0)), runs("redis-gate", 128, (9500.0, 9800.0, 20000.0))

    mark_medians(owned_64 + owned_128 + gate_64 + gate_128)

    assert [c.median for c in owned_64 + owned_128] == [False, False, True, True, False, False]
    assert representing(owned_64 + owned_128 + gate_64 + gate_128) == [owned_128[0], gate_64[0]]
    assert owned_128[0].represents == 3 and owned_64[2].represents == 0


def test_the_capacity_targets_read_the_median_runs_and_say_so():
    owned = [wrk_cell("owned-shards", orders_per_sec=r, cpu_us_per_order=c) for r, c in
             ((3000.0, {"seckill": 90.0, "postgres": 90.0, "redis": 1.0, "total": 181.0}),
              (2100.0, {"seckill": 30.0, "postgres": 50.0, "redis": 2.0, "total": 82.0}),
              (1000.0, {"seckill": 20.0, "postgres": 20.0, "redis": 1.0, "total": 41.0}))]
    gate = [wrk_cell("redis-gate", orders_per_sec=r) for r in (900.0, 3000.0, 800.0)]
    cells = owned + gate + capacity_run()[1:2]
    mark_medians(cells)

    t = by_id(capacity_targets(cells))

    how = "(each the median run by orders/s of 3 rounds at the number of connections per instance where that median is highest"
    assert t["capacity_owned_vs_redis_gate"].detail == f"2100 / 900 orders/s = x2.33 {how}: 64 and 64)"
    assert t["capacity_owned_cpu"].detail.startswith("82 µs per order (seckill 30 + PostgreSQL 50 + Redis 2 = 82")
    assert t["capacity_owned_cpu"].detail.endswith(f"{how}: 64)")
    assert t["capacity_owned_vs_db_atomic"].detail.startswith(f"2100 / 500 orders/s = x4.20 {how}")


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every POST 201 and records (Idempotency-Key, body). HTTP/1.0, a connection per
    request: with keep-alive, this server's separate writes meet delayed ACKs (~25 requests/s)."""

    seen: list = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append((self.headers["Idempotency-Key"], body))
        self.send_response(201)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_):
        pass


def _wrk_requests(keys: str, seed: str) -> dict:
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.handle_error = lambda *_: None  # wrk drops its connections when its time is up
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = subprocess.run(["wrk", "-t", "1", "-c", "2", "-d", "1s", "-s", str(WRK_ORDERS),
                              f"http://127.0.0.1:{server.server_address[1]}", "--", "sku1", "10000000", keys, seed,
                              "1:0.7,2:1"], capture_output=True, text=True, timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    assert parse_wrk(out.stdout) is not None, out.stdout + out.stderr
    return dict(_Recorder.seen)


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk not installed (scripts/bench.sh installs it)")
def test_two_wrk_runs_with_the_same_keys_and_seed_send_the_same_orders():
    first, second = _wrk_requests("ws", "1"), _wrk_requests("ws", "1")
    reseeded = _wrk_requests("ws", "2")

    common = first.keys() & second.keys()
    # ws-1-1 is never sent: wrk calls request() once on its first thread to check the script.
    assert len(common) >= 50 and "ws-1-2" in common and "ws-1-1" not in common
    assert all(first[k] == second[k] for k in common)
    # The control: another seed, the same keys, other bodies (so the equality above is not luck).
    assert sum(first[k] != reseeded[k] for k in first.keys() & reseeded.keys()) > len(common) // 4


def by_id(targets):
    return {t.id: t for t in targets}


def capacity_run(**owned):
    return [wrk_cell("owned-shards", **owned), wrk_cell("db-atomic", orders_per_sec=500.0),
            wrk_cell("redis-gate", orders_per_sec=900.0),
            wrk_cell("owned-shards", kind="storm", orders_per_sec=1500.0),
            wrk_cell("db-atomic", kind="storm", orders_per_sec=500.0),
            wrk_cell("owned-shards", kind="hot-users", orders=400, orders_per_sec=50.0, decided_per_sec=9000.0),
            wrk_cell("db-atomic", kind="hot-users", orders=400, orders_per_sec=50.0, decided_per_sec=3000.0)]


def test_capacity_targets_pass_when_owned_shards_is_far_ahead_and_cheap():
    t = by_id(capacity_targets(capacity_run(orders_per_sec=2100.0)))

    assert t["capacity_owned_vs_db_atomic"].status == "PASS"
    assert t["capacity_owned_vs_db_atomic"].detail == "2100 / 500 orders/s = x4.20"
    assert t["capacity_owned_vs_redis_gate"].status == "PASS"
    assert t["capacity_owned_cpu"].detail.startswith("82 µs per order (seckill 30 + PostgreSQL 50 + Redis 2 = 82")
    assert all(t[k].status == "PASS" for k in ("capacity_owned_pg_cpu", "capacity_owned_seckill_cpu", "storm_owned_clean",
                                               "storm_owned_vs_db_atomic", "hot_owned_clean"))
    # Hot users: the orders stop at the users' limit for both; the decided answers tell them apart.
    assert t["hot_owned_vs_db_atomic"].detail == "9000 / 3000 decided answers/s = x3.00"


def test_capacity_targets_miss_on_503s_and_on_cost():
    cells = capacity_run(orders_per_sec=1000.0, cpu_us_per_order={"seckill": 45.0, "postgres": 70.0, "redis": 1.0,
                                                                  "total": 116.0})
    cells[3].busy_503 = 4000

    t = by_id(capacity_targets(cells))

    assert t["capacity_owned_vs_db_atomic"].status == "MISS"
    assert [t[k].status for k in ("capacity_owned_cpu", "capacity_owned_pg_cpu", "capacity_owned_seckill_cpu")] == ["MISS"] * 3
    assert (t["storm_owned_clean"].status, t["storm_owned_clean"].detail) == ("MISS", "4000 answers 503, 0 other 5xx, of 8000 requests")


def test_missing_cells_miss_and_smoke_has_no_capacity_target():
    t = by_id(capacity_targets([wrk_cell("owned-shards", kind="storm")]))

    assert t["capacity_owned_vs_db_atomic"].detail == "no data"
    assert t["hot_owned_clean"].detail == "not run"
    assert capacity_targets([]) == []
    assert not any(x.id.startswith(("capacity_", "storm_", "hot_")) for x in evaluate_targets(
        [], {}, {}, smoke=True, capacity=[wrk_cell(kind="storm")]))


def test_the_capacity_table_leads_the_report_and_gives_cost_per_order_and_per_request():
    cells = capacity_run(orders_per_sec=2100.0) + [wrk_cell(None, kind="healthz", orders=0, requests=700000,
                                                            cpu_us_per_request={"seckill": 11.0, "postgres": 0.0,
                                                                                "redis": 0.0, "total": 11.0})]
    cells[3].answers = {"201": 7000, "503": 1000, "503 busy": 1000}

    text = markdown(run(capacity=cells))
    lines = capacity_rows(run(capacity=cells))

    assert text.index("## Capacity, retry storm and hot users (wrk)") < text.index("## Strategies")
    assert any(line.startswith("| capacity | owned-shards | 64 | - | 2100 |") and "| 30 + 50 + 2 = 82 | order |" in line for line in lines)
    assert any(line.startswith("| healthz | - | 64 | - | - |") and "| 11 + 0 + 0 = 11 | request |" in line for line in lines)
    assert "- owned-shards/20 (storm): 503 busy 1000" in lines
    assert len({line.count("|") for line in lines if line.startswith("|")}) == 1


def test_the_capacity_table_lists_every_run_and_marks_the_medians_and_the_capacity():
    runs = [wrk_cell(orders_per_sec=r, spec=WrkSpec("capacity", "owned-shards", 8, connections=c, round_no=n))
            for n, (r, c) in enumerate(((14000.0, 64), (9000.0, 128), (12000.0, 64), (8000.0, 128)), 1)]
    mark_medians(runs)

    lines = capacity_rows(run(capacity=runs))

    assert [line.split(" | ")[2:5] for line in lines if line.startswith("| capacity")] == [
        ["64", "1", "14 000"], ["128", "2", "9000"], ["64", "3 *median, capacity*", "12 000"], ["128", "4 *median*", "8000"]]
