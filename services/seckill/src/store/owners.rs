//! What a shard owner writes: the claim that takes a shard over, and the batch commit that
//! writes everything it decided since (see `migrations/0001_schema.sql`, `seckill_claim`, and
//! `seckill_commit_orders` in `migrations/0024_batches_answer_replays.sql`, as
//! `migrations/0025_replays_lock_no_buyer.sql` replaced it).
//!
//! The claim runs on the critical pool and the batch on the batches' own (made on the batch
//! thread, see `owned::batch_thread`); the connections of both carry a `statement_timeout` and a
//! TCP user timeout below the lease, and both are bounded on the client side too: a batch that
//! does not answer in time has an unknown fate, and its connection is dropped rather than reused.

use std::time::{Duration, SystemTime};

use deadpool_postgres::Object;
use lockkit::Fence;

use super::{Db, OrderRecord, StoreError};
use crate::{
    domain::Sale,
    domain::{Fencing, OrderRequest, ShardClaim, ShardId, Sku},
};

/// A shard of a batch as its owner knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchShard {
    /// The shard and the owner's fence for it.
    pub claim: ShardClaim,
    /// Its stock as the owner last wrote (or claimed) it.
    pub committed: i64,
    /// Until when the owner's lease on the shard's lock is known to hold (its own clock, from
    /// [`lockkit::LockGuard::remaining`]): kept with the write as evidence, never decided on.
    pub lease_until: SystemTime,
}

/// One decided order of a batch.
#[derive(Debug, Clone, Copy)]
pub struct BatchOrder<'a> {
    /// The request.
    pub request: &'a OrderRequest,
    /// Units per shard (as claimed when the order was decided), in ascending shard order.
    pub parts: &'a [(ShardClaim, u32)],
}

/// In which order a batch takes the rows that other instances' batches may want too (users and
/// idempotency keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockOrder {
    /// Ascending, one global order: two batches that want the same rows queue, never deadlock.
    Ascending,
    /// As the orders arrived: the test control, which deadlocks under a retry storm.
    Arrival,
}

/// What became of one order of a committed batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderOutcome {
    /// Written, with this order id.
    Accepted(i64),
    /// The per-user limit refused it; its units stay with the shard.
    UserLimit,
    /// Its idempotency key belongs to this committed order (a replay, or the key reused for
    /// another buyer or quantity); its units stay with the shard.
    Earlier(OrderRecord),
    /// Its idempotency key was already used, by an order of the same batch or of another
    /// instance's batch committed meanwhile; its units stay with the shard.
    Duplicate,
}

/// What a committed batch wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedBatch {
    /// One outcome per order, in order.
    pub orders: Vec<OrderOutcome>,
    /// Units of cancelled and expired orders the batch folded back into its shards' stock.
    pub returned: Vec<(ShardId, i64)>,
}

/// What became of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOutcome {
    /// Committed.
    Committed(CommittedBatch),
    /// Nothing written: these shards carry a newer fence (their owner was deposed).
    Deposed(Vec<ShardId>),
    /// Nothing written: the sale was reset since the batch's orders were decided.
    StaleSale,
}

/// Why a claim or a batch has no outcome.
#[derive(Debug, thiserror::Error)]
pub enum OwnerWriteError {
    /// No answer within the bound: the write may still happen (or may have happened).
    #[error("no answer from the database within {0:?}")]
    Unanswered(Duration),
    /// The database refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OwnerWriteError {
    /// Whether the write's fate is unknown (it may still land, fenced or not).
    pub fn is_unanswered(&self) -> bool {
        matches!(self, Self::Unanswered(_))
    }

    /// Whether the write is known not to have happened although the database answers: no
    /// connection came free (nothing was sent), or another transaction held what it needed and
    /// PostgreSQL rolled it back. Neither says the database is in trouble.
    pub fn wrote_nothing(&self) -> bool {
        matches!(self, Self::Store(e) if e.is_saturated() || e.is_contended())
    }
}

impl From<OwnerWriteError> for StoreError {
    fn from(e: OwnerWriteError) -> Self {
        match e {
            OwnerWriteError::Unanswered(bound) => StoreError::Unavailable(format!("no answer within {bound:?}")),
            OwnerWriteError::Store(e) => e,
        }
    }
}

impl Db {
    /// Takes `shard` over with `fence` for this generation of `sale`, as instance `owner`; its
    /// stock, or `None` if a claim with this or a newer fence came first (or the sale was reset).
    pub async fn claim_shard(
        &self,
        sale: &Sale,
        shard: ShardId,
        fence: Fence,
        owner: &str,
        bound: Duration,
    ) -> Result<Option<i64>, OwnerWriteError> {
        let client = self.critical.get().await.map_err(StoreError::from)?;
        bounded(client, bound, async |client| {
            let row = client
                .query_opt(
                    "SELECT remaining FROM seckill_claim($1, $2, $3, $4, $5)",
                    &[&sale.sku.as_str(), &sale.generation, &shard.as_sql(), &fence.as_i64(), &owner],
                )
                .await?;
            Ok(row.map(|r| i64::from(r.get::<_, i32>(0))))
        })
        .await
    }

    /// Commits a batch of `sale`'s orders in one statement (one round trip, one transaction),
    /// taking contended rows in `order`.
    pub async fn commit_batch(
        &self,
        sale: &Sale,
        fencing: Fencing,
        order: LockOrder,
        shards: &[BatchShard],
        orders: &[BatchOrder<'_>],
        bound: Duration,
    ) -> Result<BatchOutcome, OwnerWriteError> {
        let shard_ids: Vec<i32> = shards.iter().map(|s| s.claim.shard.as_sql()).collect();
        let fences: Vec<i64> = shards.iter().map(|s| s.claim.fence.as_i64()).collect();
        let committed: Vec<i32> = shards.iter().map(|s| s.committed as i32).collect();
        let leases: Vec<SystemTime> = shards.iter().map(|s| s.lease_until).collect();
        let users: Vec<&str> = orders.iter().map(|o| o.request.user_id.as_str()).collect();
        let quantities: Vec<i32> = orders.iter().map(|o| o.request.quantity.get() as i32).collect();
        let keys: Vec<Option<&str>> = orders.iter().map(|o| o.request.idempotency_key.as_deref()).collect();
        let (mut part_order, mut part_shard, mut part_take) = (Vec::new(), Vec::new(), Vec::new());
        for (i, order) in orders.iter().enumerate() {
            for &(claim, take) in order.parts {
                part_order.push(i as i32 + 1);
                part_shard.push(claim.shard.as_sql());
                part_take.push(take as i32);
            }
        }
        let client = self.batches.get().await.map_err(StoreError::from)?;
        let rows = bounded(client, bound, async |client| {
            // Prepared once per connection (the pool hands a batcher the same connection again and
            // again): a batch is then a Bind and an Execute in one flight of messages, with no
            // parse and no plan. A loop of batches from fresh buyers on one connection,
            // PostgreSQL backend CPU per batch, unprepared against prepared: 1 order 700/753/773
            // µs against 640/733/687, 10 orders 1167/1300 against 1033/1050.
            let statement = client.prepare_cached(COMMIT_BATCH).await?;
            client
                .query(
                    &statement,
                    &[
                        &sale.sku.as_str(),
                        &sale.generation,
                        &(sale.spec.per_user_limit as i32),
                        &(fencing == Fencing::Fenced),
                        &(order == LockOrder::Ascending),
                        &shard_ids,
                        &fences,
                        &committed,
                        &leases,
                        &users,
                        &quantities,
                        &keys,
                        &part_order,
                        &part_shard,
                        &part_take,
                    ],
                )
                .await
        })
        .await?;
        batch_outcome(&sale.sku, &rows, orders.len()).map_err(|e| OwnerWriteError::Store(StoreError::Unexpected(e)))
    }
}

/// The batch commit, as prepared on each connection of the batches' pool. An `earlier` row
/// carries the committed order in `order_id, buyer, units, shard, fence` (`OrderRecord::from_row`).
const COMMIT_BATCH: &str = "SELECT ord, outcome, order_id, buyer, units, shard, fence \
                            FROM seckill_commit_orders($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)";

/// Reads the rows of `seckill_commit_orders` for a batch of `orders` orders of `sku`.
fn batch_outcome(sku: &Sku, rows: &[tokio_postgres::Row], orders: usize) -> Result<BatchOutcome, String> {
    let mut deposed = Vec::new();
    let mut returned = Vec::new();
    let mut outcomes = vec![None; orders];
    for row in rows {
        let outcome: &str = row.get(1);
        match outcome {
            "stale_sale" => return Ok(BatchOutcome::StaleSale),
            "deposed" => deposed.push(ShardId::new(row.get::<_, i32>(5) as u32)),
            "returned" => returned.push((ShardId::new(row.get::<_, i32>(5) as u32), i64::from(row.get::<_, i32>(4)))),
            _ => {
                let ord: i32 = row.get(0);
                let slot = outcomes.get_mut((ord as usize).wrapping_sub(1)).ok_or(format!("batch outcome for order {ord}"))?;
                *slot = Some(match outcome {
                    "ok" => OrderOutcome::Accepted(row.get(2)),
                    "user_limit" => OrderOutcome::UserLimit,
                    "earlier" => OrderOutcome::Earlier(OrderRecord::from_row(sku, row, 2)),
                    "duplicate" => OrderOutcome::Duplicate,
                    other => return Err(format!("unknown batch outcome {other:?}")),
                });
            }
        }
    }
    if !deposed.is_empty() {
        return Ok(BatchOutcome::Deposed(deposed));
    }
    outcomes
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .map(|orders| BatchOutcome::Committed(CommittedBatch { orders, returned }))
        .ok_or_else(|| "an order of the batch has no outcome".into())
}

/// Runs `work` on `client` within `bound`. Past it the connection is taken out of the pool and
/// closed, never reused with a statement of unknown fate still on it.
async fn bounded<T>(
    client: Object,
    bound: Duration,
    work: impl AsyncFnOnce(&Object) -> Result<T, tokio_postgres::Error>,
) -> Result<T, OwnerWriteError> {
    let outcome = tokio::time::timeout(bound, work(&client)).await;
    match outcome {
        Ok(result) => {
            if result.is_err() {
                // A failed statement may leave the connection in any state: do not reuse it.
                drop(Object::take(client));
            }
            result.map_err(|e| OwnerWriteError::Store(e.into()))
        }
        Err(_) => {
            drop(Object::take(client));
            Err(OwnerWriteError::Unanswered(bound))
        }
    }
}
