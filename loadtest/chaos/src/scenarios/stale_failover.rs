//! `stale-failover`: a Redis failover to a replica that is one write behind, under load. For every
//! shard at once, in one `MULTI`: the lock key is deleted (the replica never saw the grant) and the
//! fence counter goes back by one (it never saw the last `INCR`). The next grant of a shard then
//! carries the same fence as the holder that may still be at work. A lease lock alone
//! cannot guarantee mutual exclusion when Redis "fails over to a replica that never saw the key";
//! fencing must. The claim is strict (`fence < t`), so a repeated token is refused when its twin
//! claimed first; an owner's writes then check `fence = t`, so the two holders of one token can
//! never both write.
//! Expected: no shard inconsistent, nothing oversold, no older fence after a newer one; the
//! tokens granted twice are counted (`equal_fence_successions`).
//!
//! The sale has only two shards, so that two holders with the same token overlap often.

use std::time::Duration;

use anyhow::Result;

use crate::{
    harness::{FaultPlan, FaultRun, RunOutcome},
    report::Check,
    settings::{Budget, SaleSettings},
};

/// Shards of the sale: few, so holders collide.
const SHARDS: u32 = 2;

/// Takes a fence counter one increment back, if it has one.
const ONE_WRITE_BACK: &str = "if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then return redis.call('DECR', KEYS[1]) end return 0";

/// Pause between two failovers.
const EVERY: Duration = Duration::from_millis(25);

/// Fails Redis over to a replica one write behind, again and again.
#[derive(Default)]
pub(crate) struct StaleFailover {
    /// Held locks dropped by a failover.
    dropped: u64,
}

impl FaultPlan for StaleFailover {
    fn name(&self) -> &'static str {
        "stale-failover"
    }

    fn description(&self) -> &'static str {
        "Fail Redis over to a replica one write behind, every 25 ms for a while, under load, on a 2-shard sale: each shard's lock key is gone and its fence counter one lower, so a new holder gets the same fence as the holder still at work. Nothing may be oversold or written under an older fence."
    }

    async fn inject(&mut self, run: &mut FaultRun<'_>) -> Result<()> {
        let keys = run.shard_lock_keys(SHARDS);
        let mut redis = run.raw_redis().await?;
        let dropped = &mut self.dropped;
        let action = format!(
            "fail over to a replica one write behind, every {} ms",
            EVERY.as_millis()
        );
        run.rounds(
            |_| true,
            async |run: &mut FaultRun<'_>, _| {
                run.volleys(action.clone(), EVERY, async || {
                    // The replica never saw the grants (lock keys gone) nor the last INCR of each
                    // fence counter that has one.
                    let mut pipe = redis::pipe();
                    pipe.atomic();
                    for key in &keys {
                        pipe.cmd("DEL").arg(key);
                    }
                    for key in &keys {
                        pipe.cmd("EVAL")
                            .arg(ONE_WRITE_BACK)
                            .arg(1)
                            .arg(format!("{key}:fence"))
                            .ignore();
                    }
                    let deleted: Vec<i64> = pipe.query_async(&mut redis).await?;
                    *dropped += deleted.iter().filter(|&&d| d == 1).count() as u64;
                    Ok(())
                })
                .await
            },
        )
        .await?;
        Ok(())
    }

    fn sale(&self, budget: &Budget) -> SaleSettings {
        SaleSettings {
            shards: SHARDS,
            ..budget.sale.clone()
        }
    }

    fn measures_recovery(&self) -> bool {
        false
    }

    fn expectations(&self, outcome: &RunOutcome<'_>) -> Vec<Check> {
        vec![Check::new(
            "held_locks_dropped",
            self.dropped > 0,
            format!(
                "{} held shard locks dropped by failovers; {} orders committed under a token granted twice",
                self.dropped, outcome.findings.equal_fence_successions
            ),
        )]
    }

    fn figures(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![("held_locks_dropped", self.dropped.into())]
    }
}
