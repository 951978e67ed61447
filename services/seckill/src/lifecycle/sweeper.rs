//! The expiry sweeper: every instance runs one. Each round asks PostgreSQL to expire a bounded
//! number of orders whose payment window has closed (by the database's clock, `FOR UPDATE SKIP
//! LOCKED`, so sweepers on several instances share the work and skip a payment in flight), until a
//! round finds fewer. A late, repeated or concurrent sweep changes nothing: an ended order is not
//! reserved any more. No timer per order and no key-expiry listener: an instance that dies
//! mid-sweep leaves its orders to the next round of any instance.

use std::{sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;

use super::Lifecycle;

/// How often, and how much, a sweeper expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepSettings {
    /// Time between rounds.
    pub interval: Duration,
    /// Most orders one statement expires.
    pub batch: u32,
}

/// Sweeps until `stop` is cancelled.
pub(super) async fn run(lifecycle: Arc<Lifecycle>, settings: SweepSettings, stop: CancellationToken) {
    let mut tick = tokio::time::interval(settings.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        loop {
            match lifecycle.expire_due(settings.batch).await {
                Ok(expired) if expired >= settings.batch => continue,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "expiry sweep failed; the next round tries again");
                    break;
                }
            }
        }
    }
}
