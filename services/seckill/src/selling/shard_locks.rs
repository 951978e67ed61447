//! The locks of a sale's shards, through lockkit on whichever backend `SECKILL_LOCKS__URL` names:
//! one lock per shard, named `seckill:SKU:SHARD` (on Redis, the key `{lockkit:seckill:SKU:SHARD}`).

use std::time::Duration;

use lockkit::{LockClient, LockGuard};

use super::InventoryError;
use crate::{
    domain::{ShardId, Sku},
    store::Db,
};

/// Locks of every sale's shards.
#[derive(Clone)]
pub struct ShardLocks {
    client: LockClient,
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

    /// Waits up to `wait` for one shard's lock (`Busy` after that).
    pub async fn lock_shard(&self, sku: &Sku, shard: ShardId, wait: Duration) -> Result<LockGuard, InventoryError> {
        Ok(self.client.lock(&Self::name(sku, shard), wait).await?)
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
