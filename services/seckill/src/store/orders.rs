//! Orders: committing one (all or nothing, through `seckill_commit`) and finding one by its
//! idempotency key.

use deadpool_postgres::GenericClient;
use lockkit::Fence;
use serde::Serialize;
use tokio_postgres::error::SqlState;

use super::{Db, StoreError, fence_from_sql};
use crate::domain::{OrderRequest, ShardId, Sku};

/// An accepted order, as answered to the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrderRecord {
    /// Order id.
    pub order_id: i64,
    /// The sale.
    pub sku: String,
    /// The buyer.
    pub user_id: String,
    /// Units bought.
    pub quantity: u32,
    /// The (first) shard the units came from.
    pub shard: ShardId,
    /// The fence under which it was written ([`OrderRecord::NO_FENCE`] for unfenced strategies).
    pub fence: Fence,
}

impl OrderRecord {
    /// The fence of an order written without one: 0, as stored and answered.
    pub const NO_FENCE: Fence = Fence::new(0);

    /// The order of `sku` in `row`'s columns from `at` on: id, buyer, quantity, first shard and
    /// fence, as `orders` stores them.
    pub(crate) fn from_row(sku: &Sku, row: &tokio_postgres::Row, at: usize) -> Self {
        Self {
            order_id: row.get(at),
            sku: sku.to_string(),
            user_id: row.get(at + 1),
            quantity: row.get::<_, i32>(at + 2) as u32,
            shard: ShardId::new(row.get::<_, i32>(at + 3) as u32),
            fence: fence_from_sql(row.get(at + 4)),
        }
    }
}

/// How the commit guards each shard write (see `seckill_commit` in the migration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitGuard {
    /// Claim each shard with our fence, read, check and write it where the fence is still ours:
    /// the whole fenced read-modify-write in one transaction.
    Claim,
    /// Write only where the version is unchanged (optimistic).
    Version,
    /// Decrement only where enough stock remains (no prior read).
    Atomic,
    /// Write blindly.
    None,
}

impl CommitGuard {
    fn as_sql(self) -> &'static str {
        match self {
            Self::Claim => "claim",
            Self::Version => "version",
            Self::Atomic => "atomic",
            Self::None => "none",
        }
    }
}

/// What guards one shard's write, matching the commit's [`CommitGuard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardGuard {
    /// The fence of the lock held on the shard ([`CommitGuard::Claim`]).
    Fence(Fence),
    /// The version the shard had when read ([`CommitGuard::Version`]).
    Version(i64),
    /// Nothing per shard ([`CommitGuard::Atomic`], [`CommitGuard::None`]).
    Unguarded,
}

impl ShardGuard {
    /// The `p_guards` value of `seckill_commit`: the fence or the version, else 0 (ignored).
    fn as_sql(self) -> i64 {
        match self {
            Self::Fence(fence) => fence.as_i64(),
            Self::Version(version) => version,
            Self::Unguarded => 0,
        }
    }
}

/// One shard's share of an order, with what the commit needs for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitPart {
    /// The shard.
    pub shard: ShardId,
    /// Units taken from it.
    pub take: u32,
    /// Stock left after this order, as computed by the caller (ignored by `Atomic` and `Claim`).
    pub new_remaining: i64,
    /// What guards the write: a fence for `Claim`, a version for `Version`; ignored otherwise.
    pub guard: ShardGuard,
}

/// Why a commit did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// A shard refused the write: stale fence, moved version, or (atomic) too little stock.
    #[error("a shard refused the write")]
    Refused,
    /// A claimed shard had less than the part needs (`Claim` only).
    #[error("shard {shard} has {remaining} left")]
    Short {
        /// The shard.
        shard: ShardId,
        /// What it has.
        remaining: i64,
    },
    /// The per-user limit would be exceeded.
    #[error("per-user limit reached")]
    UserLimit,
    /// The idempotency key is already taken (by a concurrent request with the same key).
    #[error("idempotency key already used")]
    DuplicateKey,
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<tokio_postgres::Error> for CommitError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.code().map(SqlState::code) {
            Some("SK001") => Self::Refused,
            Some("SK003") => {
                short_from_detail(&e).map_or_else(|| Self::Store(e.into()), |(shard, remaining)| Self::Short { shard, remaining })
            }
            Some("SK002") => Self::UserLimit,
            Some("23505") => Self::DuplicateKey,
            _ => Self::Store(e.into()),
        }
    }
}

/// Parses SK003's `DETAIL 'shard:remaining'`.
fn short_from_detail(e: &tokio_postgres::Error) -> Option<(ShardId, i64)> {
    let (shard, remaining) = e.as_db_error()?.detail()?.split_once(':')?;
    Some((ShardId::new(shard.parse().ok()?), remaining.parse().ok()?))
}

impl From<deadpool_postgres::PoolError> for CommitError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        Self::Store(e.into())
    }
}

impl Db {
    /// Commits an order on a pooled connection.
    pub async fn commit_order(
        &self,
        sku: &Sku,
        request: &OrderRequest,
        per_user_limit: u32,
        parts: &[CommitPart],
        guard: CommitGuard,
    ) -> Result<OrderRecord, CommitError> {
        let client = self.client().await?;
        commit_order_on(&client, sku, request, per_user_limit, parts, guard).await
    }

    /// The order stored under `key` for this sale, with its user and quantity.
    pub async fn order_by_key(&self, sku: &Sku, key: &str) -> Result<Option<OrderRecord>, StoreError> {
        let client = self.client().await?;
        // Every refusal asks this (a hot buyer's every order): prepared once per connection, so a
        // lookup is one round trip with a kept plan, not a parse, a plan and two round trips.
        let by_key =
            client.prepare_cached("SELECT id, user_id, quantity, shard, fence FROM orders WHERE sku = $1 AND idempotency_key = $2").await?;
        let row = client.query_opt(&by_key, &[&sku.as_str(), &key]).await?;
        Ok(row.map(|r| OrderRecord::from_row(sku, &r, 0)))
    }
}

/// Commits an order on `client` (a pooled connection, or a transaction the caller holds).
pub(crate) async fn commit_order_on(
    client: &impl GenericClient,
    sku: &Sku,
    request: &OrderRequest,
    per_user_limit: u32,
    parts: &[CommitPart],
    guard: CommitGuard,
) -> Result<OrderRecord, CommitError> {
    let shards: Vec<i32> = parts.iter().map(|p| p.shard.as_sql()).collect();
    let takes: Vec<i32> = parts.iter().map(|p| p.take as i32).collect();
    let new_remaining: Vec<i32> = parts.iter().map(|p| p.new_remaining as i32).collect();
    let guards: Vec<i64> = parts.iter().map(|p| p.guard.as_sql()).collect();
    let row = client
        .query_one(
            "SELECT order_id FROM seckill_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            &[
                &sku.as_str(),
                &request.user_id.as_str(),
                &(request.quantity.get() as i32),
                &request.idempotency_key,
                &(per_user_limit as i32),
                &shards,
                &takes,
                &new_remaining,
                &guard.as_sql(),
                &guards,
            ],
        )
        .await?;
    Ok(OrderRecord {
        order_id: row.get(0),
        sku: sku.to_string(),
        user_id: request.user_id.to_string(),
        quantity: request.quantity.get(),
        shard: parts[0].shard,
        fence: match (guard, parts[0].guard) {
            (CommitGuard::Claim, ShardGuard::Fence(fence)) => fence,
            _ => OrderRecord::NO_FENCE,
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record(fence: Fence) -> OrderRecord {
        OrderRecord { order_id: 7, sku: "sku-1".into(), user_id: "u1".into(), quantity: 2, shard: ShardId::new(3), fence }
    }

    #[test]
    fn answers_shard_and_fence_as_plain_numbers() {
        let expected = json!({"order_id": 7, "sku": "sku-1", "user_id": "u1", "quantity": 2, "shard": 3, "fence": 42});
        assert_eq!(serde_json::to_value(record(Fence::new(42))).unwrap(), expected);
        assert_eq!(serde_json::to_value(record(OrderRecord::NO_FENCE)).unwrap()["fence"], json!(0));
    }
}
