//! Reconciliation: recompute each shard's truth from PostgreSQL (initial minus the units in its
//! orders) and repair Redis to it, reporting what differed.
//!
//! It refuses while the queue is not empty (entries in the stream, pending or unread): those
//! units are not in PostgreSQL yet, so any repair would be wrong. With `drain` it waits (up to
//! [`DRAIN_BOUND`]) for the queue to empty first. An order is decided and enqueued by one script
//! (see [`super::script`]), so no decided order lives outside the stream, and a writer removes
//! an entry only after its commit: an empty stream means every decided order is in PostgreSQL,
//! however slow or paused the writer that read it (its late write is a duplicate of the
//! claimer's). The repair itself is one script that checks that no order was decided since the
//! truth was read (the reference counter did not move) and that the stream is still empty, so it
//! never overwrites a decrement it did not see. The buyers' counts reach it as a copy staged in
//! Redis a chunk at a time (see `staged_users`), so a sale's size bounds neither this process's
//! memory nor the script's run. What it repairs is a Redis that disagrees with
//! PostgreSQL for another reason: a restored snapshot, a failover, or keys changed by hand.

use std::time::{Duration, Instant};

use redis::{Script, aio::ConnectionManager};
use serde::Serialize;
use std::sync::LazyLock;

use super::{keys::GateKeys, script::WRITE_SALE, staged_users};
use crate::{
    domain::{Sale, ShardId},
    selling::InventoryError,
    store::{Db, StoreError},
};

/// Longest `drain` waits for the queue to empty.
pub const DRAIN_BOUND: Duration = Duration::from_secs(10);

/// What a reconciliation found and did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reconciliation {
    /// The sale.
    pub sku: String,
    /// Units decremented in Redis without an order in PostgreSQL, over all shards (repaired).
    pub undersold: i64,
    /// Units in orders beyond a shard's stock, over all shards (cannot be repaired here).
    pub oversold: i64,
    /// Units Redis would have sold beyond the truth, e.g. after restoring an old snapshot (repaired).
    pub redis_excess: i64,
    /// Per shard.
    pub shards: Vec<ShardReconciliation>,
}

/// One shard's reconciliation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardReconciliation {
    /// The shard.
    pub shard: ShardId,
    /// Its initial stock.
    pub initial: i64,
    /// Units in its orders (PostgreSQL).
    pub sold: i64,
    /// What Redis had.
    pub redis_before: i64,
    /// What Redis has now: `max(0, initial - sold)`.
    pub redis_after: i64,
    /// `max(0, redis_after - redis_before)`.
    pub undersold: i64,
    /// `max(0, sold - initial)`.
    pub oversold: i64,
}

/// Why a reconciliation did not run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReconcileError {
    /// The sale does not use `redis-gate`.
    #[error("sale {0:?} does not use redis-gate")]
    NotGate(String),
    /// The queue has entries.
    #[error("{queued} entries in the queue; retry later or drain")]
    NotDrained {
        /// Entries in the stream (pending or unread).
        queued: i64,
    },
    /// Orders kept arriving while it tried to repair.
    #[error("orders kept arriving; retry")]
    Moving,
    /// Redis or PostgreSQL failed.
    #[error(transparent)]
    Inventory(#[from] InventoryError),
}

impl From<StoreError> for ReconcileError {
    fn from(e: StoreError) -> Self {
        Self::Inventory(e.into())
    }
}

impl From<redis::RedisError> for ReconcileError {
    fn from(e: redis::RedisError) -> Self {
        Self::Inventory(e.into())
    }
}

/// Sets the stock (and `left`) and swaps the buyers' staged copy in (KEYS[6]); only if no order
/// was decided since `seq` was read and the queue is still empty, else drops the copy. ARGV: seq,
/// gen, limit, shards, stocks.
static REPAIR: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{WRITE_SALE}{}",
        r"
if (redis.call('GET', KEYS[4]) or '0') ~= ARGV[1] or redis.call('XLEN', KEYS[5]) > 0 then
  redis.call('DEL', KEYS[6])
  return 0
end
replace_users(KEYS[3], KEYS[6])
write_sale(ARGV[2], ARGV[3], tonumber(ARGV[4]), 4)
return 1
"
    ))
});

/// The raw reply of [`read_state`]'s transaction: seq, stream length, stock.
type StateReply = (Option<String>, i64, Vec<(String, i64)>);

/// Redis's side as read in one transaction.
struct RedisState {
    seq: String,
    queued: i64,
    stock: Vec<i64>,
}

async fn read_state(redis: &ConnectionManager, keys: &GateKeys, shards: usize) -> Result<RedisState, ReconcileError> {
    let (seq, queued, stock): StateReply =
        redis::pipe().atomic().get(&keys.seq).cmd("XLEN").arg(&keys.stream).hgetall(&keys.stock).query_async(&mut redis.clone()).await?;
    let mut by_shard = vec![0; shards];
    for (field, value) in stock {
        if let Some(slot) = field.parse::<usize>().ok().and_then(|i| by_shard.get_mut(i)) {
            *slot = value;
        }
    }
    Ok(RedisState { seq: seq.unwrap_or_else(|| "0".into()), queued, stock: by_shard })
}

/// Reconciles `sale` (see the module doc).
pub async fn reconcile(redis: &ConnectionManager, db: &Db, sale: &Sale, drain: bool) -> Result<Reconciliation, ReconcileError> {
    if sale.spec.strategy.gate_ack().is_none() {
        return Err(ReconcileError::NotGate(sale.sku.to_string()));
    }
    let keys = GateKeys::new(&sale.sku);
    let started = Instant::now();
    let shards = sale.spec.shards as usize;
    let mut moved = 0;
    loop {
        let state = read_state(redis, &keys, shards).await?;
        if state.queued > 0 {
            if drain && started.elapsed() < DRAIN_BOUND {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            return Err(ReconcileError::NotDrained { queued: state.queued });
        }
        let truth = db.shard_truth(&sale.sku).await?;
        let users = staged_users::stage(redis, db, &keys, &sale.sku).await?;
        let report: Vec<ShardReconciliation> = truth
            .iter()
            .map(|t| {
                let before = state.stock.get(t.shard.get() as usize).copied().unwrap_or(0);
                let after = (t.initial - t.sold).max(0);
                ShardReconciliation {
                    shard: t.shard,
                    initial: t.initial,
                    sold: t.sold,
                    redis_before: before,
                    redis_after: after,
                    undersold: (after - before).max(0),
                    oversold: (t.sold - t.initial).max(0),
                }
            })
            .collect();
        let mut invocation = REPAIR.prepare_invoke();
        for key in [&keys.meta, &keys.stock, &keys.users, &keys.seq, &keys.stream, &users.0] {
            invocation.key(key);
        }
        invocation.arg(&state.seq).arg(sale.generation).arg(sale.spec.per_user_limit).arg(report.len());
        for shard in &report {
            invocation.arg(shard.redis_after);
        }
        let repaired: i64 = invocation.invoke_async(&mut redis.clone()).await?;
        if repaired != 1 {
            moved += 1;
            if moved >= 5 {
                return Err(ReconcileError::Moving);
            }
            continue;
        }
        let sum = |f: fn(&ShardReconciliation) -> i64| report.iter().map(f).sum::<i64>();
        let reconciliation = Reconciliation {
            sku: sale.sku.to_string(),
            undersold: sum(|s| s.undersold),
            oversold: sum(|s| s.oversold),
            redis_excess: sum(|s| (s.redis_before - s.redis_after).max(0)),
            shards: report,
        };
        tracing::info!(sku = %sale.sku, undersold = reconciliation.undersold, oversold = reconciliation.oversold,
            redis_excess = reconciliation.redis_excess, "gate reconciled");
        return Ok(reconciliation);
    }
}
