"""The lifecycle cell's check (unpaid.py): a clean run passes, and each way the sale can end wrong
(k6's own verdict, a unit not paid, no return, the books, a page that disagrees with the audit)
is a violation."""

from __future__ import annotations

import json

from bench.unpaid import UnpaidResult, UnpaidSpec, check_unpaid

AUDIT = {"total": 300, "sold": 300, "reserved": 0, "paid": 300, "returned": 93, "pending_returns": 0, "remaining": 0,
         "oversold": 0, "duplicates": 0, "stranded": 0, "consistent": True, "fence_rejections": 0, "users_over_limit": 0}
LIVE = {"reserved": 0, "paid": 300, "returned": 93}


def result(audit: dict | None = None, live: dict | None = None, page2: dict | None = None, **fields) -> UnpaidResult:
    """A run whose audit and live views (#1 shows `live`, #2 `page2`, both `live` unless given)
    are the clean ones with these changes."""
    page1 = {**LIVE, **(live or {})}
    defaults = dict(sku="bench-r1-unpaid", k6_exit=0, k6_log=".run/bench/x/k6-unpaid.log", audit={**AUDIT, **(audit or {})},
                    live={"1": page1, "2": {**LIVE, **page2} if page2 is not None else dict(page1)})
    return UnpaidResult(spec=UnpaidSpec(), **{**defaults, **fields})


def test_a_clean_run_has_no_violation():
    assert check_unpaid(result()) == []


def test_k6_failing_its_thresholds_is_a_violation():
    [v] = check_unpaid(result(k6_exit=99))
    assert "k6 exited 99" in v and "k6-unpaid.log" in v


def test_a_unit_left_unpaid_is_a_violation():
    [v] = check_unpaid(result(audit={"paid": 299, "reserved": 1}, live={"paid": 299, "reserved": 1}))
    assert "299 of 300 units paid, 1 reserved" in v


def test_a_sale_with_no_return_is_a_violation():
    [v] = check_unpaid(result(audit={"returned": 0}, live={"returned": 0}))
    assert "no unit came back" in v


def test_inexact_books_are_a_violation():
    assert check_unpaid(result(audit={"consistent": False})) == ["unpaid: audit consistent=False"]


def test_a_page_that_disagrees_with_the_audit_is_a_violation():
    [v] = check_unpaid(result(live={"paid": 0, "reserved": 300}, page2={}))
    assert v == "unpaid: the live view of seckill #1 shows reserved 300 (audit 0), paid 0 (audit 300)"


def test_a_missing_audit_or_live_view_is_a_violation():
    no_audit = result(audit_error="status 503")
    no_audit.audit = None
    assert check_unpaid(no_audit) == ["unpaid: no audit (status 503)"]
    missing = result()
    missing.live["1"] = None
    assert check_unpaid(missing) == ["unpaid: no live view from seckill #1"]


def test_the_result_is_json():
    assert json.loads(json.dumps(result().to_json()))["spec"]["total"] == 300


def test_the_small_run_is_bounded():
    spec = UnpaidSpec()
    assert spec.rate * spec.duration_s > spec.total, "more buyers than units, so returned units are sold again"
    assert spec.timeout_s() < 120
