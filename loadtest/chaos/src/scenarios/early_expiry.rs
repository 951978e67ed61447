//! `early-expiry`: from outside, `PEXPIRE` every shard lock key (`{lockkit:seckill:SKU:N}`) to
//! 1 ms, again and again under load: a stand-in for a Redis clock jump that ends leases early.
//! Two holders then work on a shard at once; the fences must refuse the older one.
//!
//! The sale has one shard, which both instances want and sell in turns: when its key vanishes,
//! the other instance is there to take it while the owner still sells from memory. With twenty
//! shards each owner would keep selling its own and nobody would step in.

use std::time::Duration;

use anyhow::Result;

use crate::{
    harness::{FaultPlan, FaultRun, RunOutcome},
    report::Check,
    settings::{Budget, SaleSettings},
};

/// Pause between two volleys of `PEXPIRE`s.
const EVERY: Duration = Duration::from_millis(20);

/// Expires the shard locks early, in bursts.
#[derive(Default)]
pub(crate) struct EarlyExpiry {
    /// `PEXPIRE`s that hit a held lock.
    expired: u64,
}

impl FaultPlan for EarlyExpiry {
    fn name(&self) -> &'static str {
        "early-expiry"
    }

    fn description(&self) -> &'static str {
        "PEXPIRE every shard lock key to 1 ms from outside, every 20 ms for a while, under load (a stand-in for a Redis clock jump): two holders overlap and the fences refuse the older one; nothing oversold."
    }

    fn sale(&self, budget: &Budget) -> SaleSettings {
        SaleSettings {
            shards: 1,
            ..budget.sale.clone()
        }
    }

    async fn inject(&mut self, run: &mut FaultRun<'_>) -> Result<()> {
        let shards = self.sale(run.budget).shards;
        let keys = run.shard_lock_keys(shards);
        let mut redis = run.raw_redis().await?;
        let expired = &mut self.expired;
        let action = format!(
            "PEXPIRE {shards} shard lock keys to 1 ms every {} ms",
            EVERY.as_millis()
        );
        run.rounds(
            |probe| probe.fence_rejections > 0,
            async |run: &mut FaultRun<'_>, _| {
                run.volleys(action.clone(), EVERY, async || {
                    let mut pipe = redis::pipe();
                    for key in &keys {
                        pipe.cmd("PEXPIRE").arg(key).arg(1);
                    }
                    let hits: Vec<i64> = pipe.query_async(&mut redis).await?;
                    *expired += hits.iter().filter(|&&h| h == 1).count() as u64;
                    Ok(())
                })
                .await
            },
        )
        .await?;
        Ok(())
    }

    fn measures_recovery(&self) -> bool {
        false
    }

    fn expectations(&self, outcome: &RunOutcome<'_>) -> Vec<Check> {
        let stale = outcome.findings.stale_rejected;
        vec![
            Check::new(
                "held_locks_expired",
                self.expired > 0,
                format!("{} held shard locks expired from outside", self.expired),
            ),
            Check::new(
                "fence_rejections_seen",
                stale > 0,
                format!("{stale} claims/writes refused by fences"),
            ),
        ]
    }

    fn figures(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![("locks_expired_from_outside", self.expired.into())]
    }
}
