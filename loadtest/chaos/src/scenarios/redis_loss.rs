//! `redis-loss`: `kill -9` the suite's Redis mid-load and restart it empty (no persistence):
//! every lock and every fence counter is gone. Fence counters restart below what PostgreSQL has
//! accepted, so the first claims after the restart are refused, and the service re-seeds the
//! counters from the store by itself. Measured: the time from the kill to the first 201 after the
//! restart.
//!
//! The sale has two shards: an owner takes a shard once and keeps it, so with the usual twenty
//! the instances would mostly take shards never claimed before after a restart, whose stored
//! fence is 0, and the refusal this scenario is about would rarely be exercised.

use anyhow::Result;

use crate::{
    harness::{FaultPlan, FaultRun, RunOutcome},
    report::Check,
    settings::{Budget, SaleSettings},
};

/// Kills Redis and restarts it empty, in rounds.
pub(crate) struct RedisLoss;

impl FaultPlan for RedisLoss {
    fn name(&self) -> &'static str {
        "redis-loss"
    }

    fn description(&self) -> &'static str {
        "kill -9 Redis mid-load and restart it empty (no persistence): locks and fence counters are gone; the service must re-seed its fences from PostgreSQL by itself and sell on, without overselling."
    }

    fn sale(&self, budget: &Budget) -> SaleSettings {
        SaleSettings {
            shards: 2,
            ..budget.sale.clone()
        }
    }

    async fn inject(&mut self, run: &mut FaultRun<'_>) -> Result<()> {
        // Down for one lease: long enough for every client to notice, short enough to measure
        // recovery rather than downtime.
        let down = run.budget.lease();
        run.rounds(
            |probe| probe.fence_rejections > 0,
            async |run: &mut FaultRun<'_>, _| run.lose_redis("", down).await,
        )
        .await?;
        Ok(())
    }

    fn damage_row(&self) -> bool {
        true
    }

    fn expectations(&self, outcome: &RunOutcome<'_>) -> Vec<Check> {
        let stale = outcome.findings.stale_rejected;
        vec![Check::new(
            "fences_reseeded_from_store",
            stale > 0,
            format!(
                "{stale} claims refused with counters below the store's fences (each followed by a re-seed), after {} restart(s)",
                outcome.rounds
            ),
        )]
    }
}
