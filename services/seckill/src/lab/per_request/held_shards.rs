//! [`HeldShards`]: the shard locks one attempt holds, taken in the plan's ascending shard order so
//! that concurrent attempts over several shards cannot deadlock.

use std::time::Instant;

use lockkit::{Fence, LockGuard};

use super::planner::Plan;
use crate::{
    domain::{ShardId, Sku},
    selling::{InventoryError, ShardLocks},
};

/// Shard locks held for one attempt, in the plan's (ascending) order.
pub(super) struct HeldShards {
    guards: Vec<LockGuard>,
}

impl HeldShards {
    /// Locks the plan's shards in ascending order. A probing plan tries once and reports the
    /// contended shard as `Err(shard)`; a waiting plan waits until `deadline` (then `Busy`).
    pub(super) async fn lock(
        locks: &ShardLocks,
        sku: &Sku,
        plan: &Plan,
        deadline: Instant,
    ) -> Result<Result<Self, ShardId>, InventoryError> {
        let mut guards = Vec::with_capacity(plan.parts.len());
        for part in &plan.parts {
            let guard = if plan.wait {
                locks.lock_shard(sku, part.shard, deadline.saturating_duration_since(Instant::now())).await?
            } else {
                match locks.try_lock_shard(sku, part.shard).await? {
                    Some(guard) => guard,
                    // Guards taken so far are released in the background by their Drop.
                    None => return Ok(Err(part.shard)),
                }
            };
            guards.push(guard);
        }
        Ok(Ok(Self { guards }))
    }

    /// The fence of the i-th locked shard (plan order).
    pub(super) fn fence(&self, i: usize) -> Fence {
        self.guards[i].fence()
    }

    /// Whether any lease was already lost (the watchdog said so): do not write.
    pub(super) fn any_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Releases every lock; failures only delay the next holder until the lease ends.
    pub(super) async fn release(self) {
        for guard in self.guards {
            if let Err(e) = guard.release().await {
                tracing::warn!(error = %e, "shard lock release failed; it will expire");
            }
        }
    }
}
