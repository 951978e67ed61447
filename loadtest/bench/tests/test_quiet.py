"""The wait for a quiet box before a measured cell, on made-up /proc samples."""

from itertools import accumulate

import pytest

from bench import quiet
from bench.cpu import CLK_TCK


def ticks_feed(monkeypatch, server_ticks_per_window):
    """process_ticks() answers a postgres process whose ticks grow by the given amounts, one per
    window; time.sleep does not sleep and the clock moves by the window."""
    clock = {"now": 0.0}
    samples = iter([0] + list(accumulate(server_ticks_per_window)))
    monkeypatch.setattr(quiet.time, "sleep", lambda s: clock.__setitem__("now", clock["now"] + s))
    monkeypatch.setattr(quiet.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(quiet, "process_ticks", lambda: {42: ("postgres", next(samples))})


def test_the_wait_ends_at_the_first_quiet_window(monkeypatch):
    busy = CLK_TCK // 2  # half a second of CPU in a half-second window: one full core
    ticks_feed(monkeypatch, [busy, busy, 0, busy])

    waited, pct = quiet.wait_until_quiet(longest_s=20, window_s=0.5)

    assert waited == pytest.approx(1.5)
    assert pct < quiet.QUIET_SERVER_PCT


def test_a_box_that_stays_busy_is_waited_for_at_most_the_longest(monkeypatch):
    busy = CLK_TCK // 2
    ticks_feed(monkeypatch, [busy] * 10)

    waited, pct = quiet.wait_until_quiet(longest_s=2, window_s=0.5)

    assert waited == pytest.approx(2.0)
    assert pct == pytest.approx(100.0)
