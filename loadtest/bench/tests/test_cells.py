"""The correctness check of one cell, the acknowledged-orders log, the sale window, and the sales'
payment window."""

from pathlib import Path

from bench.capacity import WrkSpec, sale_body
from bench.cells import CellContext, CellSpec, check_cell, k6_env, parse_acks, sale_window, unexpected_reasons
from bench.settings import BENCH_PAYMENT_WINDOW_MS, LoadModel
from factories import cell, control


def test_a_clean_protected_cell_has_no_violation():
    assert check_cell(cell("owned-shards")) == []


def test_a_protected_strategy_that_oversells_is_a_violation():
    violations = check_cell(cell("redis-lock", audit={"oversold": 3}))

    assert violations == ["redis-lock/20: audit oversold=3"]


def test_stranded_units_and_inconsistent_shards_are_violations():
    violations = check_cell(cell(audit={"stranded": 2, "consistent": False}))

    assert "db-atomic/20: audit stranded=2" in violations
    assert "db-atomic/20: audit consistent=False" in violations


def test_acknowledged_orders_missing_from_the_table_are_a_violation_for_every_strategy():
    for c in (cell("redis-gate", acked=50, acked_missing=2, acked_missing_sample=["k6-a", "k6-b"]),
              control(acked=50, acked_missing=1, acked_missing_sample=["k6-c"])):
        assert any("acknowledged orders missing" in v for v in check_cell(c)), c.name


def test_the_control_that_oversold_passes():
    assert check_cell(control()) == []


def test_the_control_that_did_not_oversell_fails_the_run():
    # The point of the control: without a race, the zeros of the others prove nothing.
    violations = check_cell(control(oversold=0, k6_exit=0))

    assert violations == ["none/20: the control did not oversell (oversold=0): the load did not race"]


def test_the_control_may_cross_only_the_oversell_thresholds():
    violations = check_cell(control(failed_thresholds=["audit_oversold", "server_errors"], unexpected_reasons=["order_got_500"]))

    assert violations == ["none/20: k6 thresholds other than oversell crossed: server_errors (answers: order_got_500)"]


def test_none_outside_a_mission_cell_need_not_oversell():
    assert check_cell(cell("none", kind="throughput")) == []


def test_a_k6_run_that_did_not_complete_is_a_violation():
    violations = check_cell(cell(k6_exit=107, k6_verdict="aborted"))

    assert violations[0].startswith("db-atomic/20: k6 did not complete (exit 107, verdict aborted)")


def test_an_unreadable_audit_is_a_violation():
    unread = cell()
    unread.audit, unread.audit_error = None, "status 404"

    assert check_cell(unread) == ["db-atomic/20: audit unreadable (status 404)"]


def test_acks_are_read_from_k6_console_output():
    text = ('time="2026-12-01T00:00:00Z" level=info msg="ack k6-abc-3-17 4211" source=console\n'
            'time="2026-12-01T00:00:00Z" level=warning msg="unexpected answer (order_got_500_null) to order" source=console\n'
            'time="2026-12-01T00:00:00Z" level=info msg="ack k6-abc-4-2 -7" source=console\n')

    assert parse_acks(text) == {"k6-abc-3-17": "4211", "k6-abc-4-2": "-7"}
    assert unexpected_reasons(text) == ["order_got_500_null"]


def test_the_sale_window_ends_at_the_last_order_only_when_the_sale_sold_out():
    assert sale_window(100.0, 103.5, sold_out=True, duration_s=20) == 3.5
    assert sale_window(100.0, 103.5, sold_out=False, duration_s=20) == 20
    assert sale_window(None, 103.5, sold_out=True, duration_s=20) is None


def test_a_cell_serialises_flat_with_its_kind_as_cell():
    out = cell("owned-shards", kind="latency", fraction=0.5).to_json()

    assert (out["strategy"], out["shards"], out["cell"], out["fraction"]) == ("owned-shards", 20, "latency", 0.5)
    assert out["sku"] == "bench-r1-owned-shards-20-at4000"
    assert "spec" not in out


def test_only_owned_sales_get_the_bench_payment_window():
    ctx = CellContext(pg=None, redis=None, instances=[], token="t", run_id="r1", run_dir=Path("/tmp"))

    def env(strategy):
        spec = CellSpec(strategy, 20, "mission", total=10, users=10, rate=10, duration_s=1, vus_limit=10, pre_vus=1)
        return k6_env(ctx, spec, Path("/tmp/s.json"))

    def body(strategy):
        return sale_body(WrkSpec("capacity", strategy, 8), LoadModel.read())

    assert env("owned-shards")["PAYMENT_WINDOW_MS"] == env("owned-unfenced")["PAYMENT_WINDOW_MS"] == str(BENCH_PAYMENT_WINDOW_MS)
    assert "PAYMENT_WINDOW_MS" not in env("db-atomic") and "PAYMENT_WINDOW_MS" not in env("redis-gate")
    assert body("owned-shards")["payment_window_ms"] == BENCH_PAYMENT_WINDOW_MS
    assert "payment_window_ms" not in body("redis-gate")
