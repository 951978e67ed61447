//! `pg-restart`: `pg_ctl -m fast stop`, then start again, mid-load. Fast shutdown aborts open
//! transactions and disconnects every client. While PostgreSQL is down clients must get clear
//! 503s (never a 500), no order may be left half-written, and every acknowledged order must be
//! there afterwards.

use anyhow::Result;

use crate::{
    harness::{FaultPlan, FaultRun, RunOutcome},
    history::Outcome,
    report::Check,
};

/// Restarts in every run, the bounded one included.
const MIN_RESTARTS: u32 = 2;

/// Stops PostgreSQL (fast) and starts it again, in rounds.
pub(crate) struct PgRestart;

impl FaultPlan for PgRestart {
    fn name(&self) -> &'static str {
        "pg-restart"
    }

    fn description(&self) -> &'static str {
        "pg_ctl -m fast stop, then start, mid-load: clients see clear 503s while it is down (never 500), no partial orders, every acknowledged order present afterwards."
    }

    async fn inject(&mut self, run: &mut FaultRun<'_>) -> Result<()> {
        let down = run.budget.fault_length;
        // A 500 needs a query in flight at the very moment of the shutdown: give it two chances.
        run.rounds_at_least(
            MIN_RESTARTS,
            |_| true,
            async |run: &mut FaultRun<'_>, _| {
                let pid = run.env.postgres.pid().unwrap_or_default();
                run.outage(
                    format!(
                        "pg_ctl -m fast stop (postmaster pid {pid}), start after {} ms",
                        down.as_millis()
                    ),
                    None,
                    down,
                    async |run: &mut FaultRun<'_>| run.env.postgres.stop_fast().await,
                    async |run: &mut FaultRun<'_>| run.env.postgres.restart().await,
                )
                .await
            },
        )
        .await?;
        Ok(())
    }

    fn expectations(&self, outcome: &RunOutcome<'_>) -> Vec<Check> {
        let unavailable = outcome.completed_during_faults(|o| o.status() == Some(503));
        let server_errors = outcome.completed_during_faults(Outcome::is_server_error);
        vec![Check::new(
            "clear_503_while_down",
            unavailable > 0 && server_errors == 0,
            format!(
                "{unavailable} answers 503 and {server_errors} other 5xx while PostgreSQL was down"
            ),
        )]
    }
}
