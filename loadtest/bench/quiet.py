"""A measured cell starts on a quiet box: what earlier cells left behind (autovacuum of the rows
they wrote, Redis expiring their keys, a gate's writer draining its queue) must not be counted in
the next cell's CPU per order. The same two instances, PostgreSQL and Redis serve every cell."""

from __future__ import annotations

import time

from .cpu import group_cpu_s, process_ticks
from .processes import SetupError, log
from .stores import Pg

# The servers' CPU, in % of one core, below which the box counts as quiet (two idle instances,
# PostgreSQL and Redis use a few %: lease renewals, the expiry sweep).
QUIET_SERVER_PCT = 10.0

# The longest a cell waits for the box to go quiet.
QUIET_LONGEST_S = 20.0


def wait_until_quiet(longest_s: float = QUIET_LONGEST_S, window_s: float = 0.5) -> tuple[float, float]:
    """Waits until the servers (seckill, postgres, redis-server) use less than
    `QUIET_SERVER_PCT` of one core over a `window_s` window, or `longest_s` has passed. Returns
    (seconds waited, the servers' % of one core in the last window)."""
    started = time.monotonic()
    before = process_ticks()
    while True:
        time.sleep(window_s)
        after = process_ticks()
        used = group_cpu_s(before, after)
        pct = (used["seckill"] + used["postgres"] + used["redis"]) / window_s * 100
        waited = time.monotonic() - started
        if pct < QUIET_SERVER_PCT or waited >= longest_s:
            return waited, pct
        before = after


def settle(pg: Pg, what: str) -> None:
    """Before a measured window: `VACUUM ANALYZE` the database, as pgbench does before its runs,
    so that autovacuum of what the earlier cells wrote does not run inside the window (it ran
    about every two minutes on the order tables in a full run, at a few % of a core: under the
    quiet threshold, yet tens of µs per order at a moderate load). Then `CHECKPOINT`, so that the
    checkpointer does not write the earlier cells' dirty pages inside the window either: that
    would be PostgreSQL CPU counted against the window's orders, and disk writes that the window's
    own commits wait behind in their WAL flush. A precaution, added while a full run's 50% point
    had a p99 of 56 ms with the box half idle (partial runs: 22-25 ms); in the next full run every
    CHECKPOINT took 0.2 s or less, so there was little for it to move out of the windows.
    CHECKPOINT needs a superuser or pg_checkpoint: without it the window starts without one, and
    the log says so."""
    started = time.monotonic()
    pg.rows("VACUUM ANALYZE", timeout=600)
    vacuumed = time.monotonic()
    try:
        pg.rows("CHECKPOINT", timeout=600)
        checkpoint = f", CHECKPOINT in {time.monotonic() - vacuumed:.1f} s"
    except SetupError as e:
        checkpoint = f"; no CHECKPOINT ({e})"
    log(f"{what}: VACUUM ANALYZE in {vacuumed - started:.1f} s{checkpoint}")


def quiet(what: str) -> None:
    """Waits for a quiet box before `what`, and logs how long it took."""
    waited, pct = wait_until_quiet()
    log(f"    quiet before {what} after {waited:.1f} s (servers at {pct:.0f}% of a core)")


def ready(pg: Pg, what: str) -> None:
    """Before each measured wrk cell and latency point: `settle`, then `quiet`. Once per section
    was not enough: each cell or point writes tens of thousands of orders, and the autovacuum and
    auto-analyze they trigger landed in the next window, at about 20% of a core for a few seconds
    (seen in a per-process sample of a partial run); the same point then cost 156 or 246 µs per
    order from one run to the next. Each window now starts with no maintenance owed by an earlier
    one, and its own is done before the next (outside any window, as pgbench does it)."""
    settle(pg, f"    before {what}")
    quiet(what)
