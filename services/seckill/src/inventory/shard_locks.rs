//! The locks of a sale's shards, through lockkit on whichever backend `SECKILL_LOCKS__URL` names:
//! one lock per shard, named `seckill:SKU:SHARD` (on Redis, the key `{lockkit:seckill:SKU:SHARD}`).

use std::time::Instant;

use lockkit::{Fence, LockClient, LockGuard};

use super::planner::Plan;
use crate::{
    domain::{ShardId, Sku},
    inventory::InventoryError,
    store::Db,
};

/// Locks of every sale's shards.
#[derive(Clone)]
pub struct ShardLocks {
    client: LockClient,
}

/// Shard locks held for one attempt, in the plan's (ascending) order.
pub struct HeldShards {
    guards: Vec<LockGuard>,
}

impl ShardLocks {
    /// Wraps a lockkit client (its default lease and watchdog apply).
    pub fn new(client: LockClient) -> Self {
        Self { client }
    }

    /// The lockkit client, e.g. for readiness checks.
    pub fn client(&self) -> &LockClient {
        &self.client
    }

    fn name(sku: &Sku, shard: ShardId) -> String {
        format!("seckill:{sku}:{shard}")
    }

    /// Locks the plan's shards in ascending order. A probing plan tries once and reports the
    /// contended shard as `Err(shard)`; a waiting plan waits until `deadline` (then `Busy`).
    pub async fn lock(&self, sku: &Sku, plan: &Plan, deadline: Instant) -> Result<Result<HeldShards, ShardId>, InventoryError> {
        let mut guards = Vec::with_capacity(plan.parts.len());
        for part in &plan.parts {
            let name = Self::name(sku, part.shard);
            let guard = if plan.wait {
                let wait = deadline.saturating_duration_since(Instant::now());
                self.client.lock(&name, wait).await?
            } else {
                match self.client.try_lock(&name).await? {
                    Some(guard) => guard,
                    // Guards taken so far are released in the background by their Drop.
                    None => return Ok(Err(part.shard)),
                }
            };
            guards.push(guard);
        }
        Ok(Ok(HeldShards { guards }))
    }

    /// Tries once to lock one shard (an owner taking it over); `None` when someone holds it.
    pub async fn try_lock_shard(&self, sku: &Sku, shard: ShardId) -> Result<Option<LockGuard>, InventoryError> {
        Ok(self.client.try_lock(&Self::name(sku, shard)).await?)
    }

    /// After a claim was refused: if the store has seen a larger fence than Redis would grant
    /// (Redis lost its counters), raise the counter so the next grant outranks the store.
    pub async fn reseed_from_store(&self, db: &Db, sku: &Sku, shard: ShardId) -> Result<(), InventoryError> {
        let stored = db.shard_fence(sku, shard).await?;
        let name = Self::name(sku, shard);
        let fence = self.client.ensure_fence_at_least(&name, stored).await?;
        tracing::debug!(%sku, %shard, %stored, fence = %fence, "fence counter re-seeded from the store");
        Ok(())
    }
}

impl HeldShards {
    /// The fence of the i-th locked shard (plan order).
    pub fn fence(&self, i: usize) -> Fence {
        self.guards[i].fence()
    }

    /// Whether any lease was already lost (the watchdog said so): do not write.
    pub fn any_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Releases every lock; failures only delay the next holder until the lease ends.
    pub async fn release(self) {
        for guard in self.guards {
            if let Err(e) = guard.release().await {
                tracing::warn!(error = %e, "shard lock release failed; it will expire");
            }
        }
    }
}
