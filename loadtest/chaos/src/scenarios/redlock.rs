//! `redlock`: Redlock node failures (a minority of nodes killed, restarted empty, or partitioned
//! while a majority lock is held). lockkit has no Redlock yet, so the scenario is listed as not
//! applicable, visibly, rather than silently missing.

use crate::report::ScenarioReport;

/// The not-applicable report.
pub(crate) fn report() -> ScenarioReport {
    ScenarioReport::not_applicable(
        "redlock",
        "Redlock node failures: kill, restart empty or partition a minority of the Redis nodes while a majority lock is held.",
        "not applicable yet: lockkit has no Redlock (multi-node) client; add this scenario with it",
    )
}
