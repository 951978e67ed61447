//! Reading one shard's stock, in the ways the strategies need: plainly, by claiming it with a
//! fence, with its version, or locked `FOR UPDATE` inside a transaction.

use deadpool_postgres::GenericClient;
use lockkit::Fence;

use super::StoreError;
use super::{Db, ShardGuard, fence_from_sql};
use crate::domain::{ShardId, Sku};

/// What a read of a shard returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardRead {
    /// Units left.
    pub remaining: i64,
    /// What the commit must guard the write with: the version for a versioned read, else
    /// [`ShardGuard::Unguarded`].
    pub guard: ShardGuard,
}

impl Db {
    /// The shard's stock, unprotected.
    pub async fn read_shard(&self, sku: &Sku, shard: ShardId) -> Result<ShardRead, StoreError> {
        let client = self.client().await?;
        let row = client.query_one("SELECT remaining FROM shards WHERE sku = $1 AND shard = $2", &[&sku.as_str(), &shard.as_sql()]).await?;
        Ok(ShardRead { remaining: i64::from(row.get::<_, i32>(0)), guard: ShardGuard::Unguarded })
    }

    /// The highest fence the shard has accepted.
    pub async fn shard_fence(&self, sku: &Sku, shard: ShardId) -> Result<Fence, StoreError> {
        let client = self.client().await?;
        let row = client.query_one("SELECT fence FROM shards WHERE sku = $1 AND shard = $2", &[&sku.as_str(), &shard.as_sql()]).await?;
        Ok(fence_from_sql(row.get(0)))
    }

    /// The shard's stock and version, for a compare-and-set.
    pub async fn read_shard_versioned(&self, sku: &Sku, shard: ShardId) -> Result<ShardRead, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT remaining, version FROM shards WHERE sku = $1 AND shard = $2", &[&sku.as_str(), &shard.as_sql()])
            .await?;
        Ok(ShardRead { remaining: i64::from(row.get::<_, i32>(0)), guard: ShardGuard::Version(row.get(1)) })
    }

    /// Total units left over all shards of the sale: the authority for `sold_out`. Returns not
    /// yet folded into a shard count: an owner or the next claim will sell them.
    pub async fn total_remaining(&self, sku: &Sku) -> Result<i64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT (SELECT COALESCE(SUM(remaining), 0) FROM shards WHERE sku = $1)
                      + (SELECT COALESCE(SUM(quantity), 0) FROM stock_returns WHERE sku = $1 AND applied_fence IS NULL)",
                &[&sku.as_str()],
            )
            .await?;
        Ok(row.get(0))
    }
}

/// Locks the shards `FOR UPDATE` (in ascending order, so concurrent transactions cannot deadlock)
/// within the caller's transaction and reads them.
pub(crate) async fn lock_shards_for_update(tx: &impl GenericClient, sku: &Sku, shards: &[ShardId]) -> Result<Vec<ShardRead>, StoreError> {
    let shards: Vec<i32> = shards.iter().map(|s| s.as_sql()).collect();
    let rows = tx
        .query(
            "SELECT shard, remaining FROM shards WHERE sku = $1 AND shard = ANY($2) ORDER BY shard FOR UPDATE",
            &[&sku.as_str(), &shards],
        )
        .await?;
    Ok(rows.iter().map(|r| ShardRead { remaining: i64::from(r.get::<_, i32>(1)), guard: ShardGuard::Unguarded }).collect())
}
