//! The articles' strategies: each request decides its own order, against PostgreSQL, under shard
//! locks or a conditional write. Six ways to protect the stock behind one [`Strategy`] trait, one
//! file each, and one purchase loop ([`sell`]) that does not know which one runs:
//!
//! | strategy | protection |
//! |---|---|
//! | `none` | nothing: the control that oversells |
//! | `redis-lock` | shard locks around read-then-write |
//! | `sharded-fenced` | shard locks plus fenced writes |
//! | `db-atomic` | one conditional `UPDATE` |
//! | `db-pessimistic` | `SELECT ... FOR UPDATE` |
//! | `db-optimistic` | a version compare-and-set |

mod db_atomic;
mod db_optimistic;
mod db_pessimistic;
mod held_shards;
mod none;
pub mod planner;
mod redis_lock;
mod sell;
mod sharded_fenced;

use std::{future::Future, pin::Pin, time::Instant};

pub use self::sell::sell;
use self::{held_shards::HeldShards, planner::Plan};
use crate::{
    domain::Sale,
    domain::{OrderRequest, ShardId, StrategyKind},
    selling::{BuyError, ShardLocks},
    store::{CommitError, CommitGuard, CommitPart, Db, OrderRecord, ShardRead},
};

/// What one attempt at a plan came to.
#[derive(Debug)]
pub enum Attempt {
    /// Sold.
    Bought(OrderRecord),
    /// The shard had less than planned (the hint was high); this is what it has.
    Short {
        /// The shard.
        shard: ShardId,
        /// What it really has.
        remaining: i64,
    },
    /// The shard's lock is held by someone else (probing plans only).
    Contended(ShardId),
    /// A fence or version refused the write; nothing was sold. Retry.
    Refused,
}

/// What a strategy works with.
pub struct Ctx {
    /// PostgreSQL.
    pub db: Db,
    /// Redis shard locks.
    pub locks: ShardLocks,
}

/// A boxed attempt future (the trait is used as `dyn`).
pub type AttemptFuture<'a> = Pin<Box<dyn Future<Output = Result<Attempt, BuyError>> + Send + 'a>>;

/// One way to protect a sale's stock.
pub trait Strategy: Send + Sync {
    /// Tries to sell `request` from the shards of `plan` before `deadline`.
    fn attempt<'a>(
        &'a self,
        ctx: &'a Ctx,
        sale: &'a Sale,
        request: &'a OrderRequest,
        plan: &'a Plan,
        deadline: Instant,
    ) -> AttemptFuture<'a>;
}

/// The per-request strategy of a sale; `None` for the owned strategies, which do not decide
/// per request (see [`owned`](crate::owned)) and the gate ([`gate`](crate::lab::gate)).
pub fn for_kind(kind: StrategyKind) -> Option<&'static dyn Strategy> {
    Some(match kind {
        StrategyKind::NoLock => &none::NoLock,
        StrategyKind::RedisLock => &redis_lock::RedisLock,
        StrategyKind::ShardedFenced => &sharded_fenced::ShardedFenced,
        StrategyKind::DbAtomic => &db_atomic::DbAtomic,
        StrategyKind::DbPessimistic => &db_pessimistic::DbPessimistic,
        StrategyKind::DbOptimistic => &db_optimistic::DbOptimistic,
        StrategyKind::OwnedShards | StrategyKind::OwnedUnfenced | StrategyKind::RedisGate | StrategyKind::RedisGateDurable => return None,
    })
}

/// The commit parts for `plan` given what was read from each shard, or the first shard that has
/// too little.
fn parts_after_reads(plan: &Plan, reads: &[ShardRead]) -> Result<Vec<CommitPart>, Attempt> {
    plan.parts
        .iter()
        .zip(reads)
        .map(|(part, read)| {
            if read.remaining < i64::from(part.take) {
                Err(Attempt::Short { shard: part.shard, remaining: read.remaining })
            } else {
                Ok(CommitPart {
                    shard: part.shard,
                    take: part.take,
                    new_remaining: read.remaining - i64::from(part.take),
                    guard: read.guard,
                })
            }
        })
        .collect()
}

/// Maps a commit outcome to an attempt.
fn committed(result: Result<OrderRecord, CommitError>) -> Result<Attempt, BuyError> {
    match result {
        Ok(record) => Ok(Attempt::Bought(record)),
        Err(CommitError::Refused) => Ok(Attempt::Refused),
        Err(CommitError::Short { shard, remaining }) => Ok(Attempt::Short { shard, remaining }),
        Err(CommitError::UserLimit) => Err(BuyError::UserLimit),
        Err(CommitError::DuplicateKey) => Err(BuyError::DuplicateKey),
        Err(CommitError::Store(e)) => Err(BuyError::Api(e.into())),
    }
}

/// Locks the plan's shards, runs `work` under them, releases them: the frame of the lock-based
/// strategies. A contended probe comes back as [`Attempt::Contended`] without running `work`.
async fn under_shard_locks(
    ctx: &Ctx,
    sale: &Sale,
    plan: &Plan,
    deadline: Instant,
    work: impl AsyncFnOnce(&HeldShards) -> Result<Attempt, BuyError>,
) -> Result<Attempt, BuyError> {
    let held = match HeldShards::lock(&ctx.locks, &sale.sku, plan, deadline).await? {
        Ok(held) => held,
        Err(shard) => return Ok(Attempt::Contended(shard)),
    };
    let attempt = work(&held).await;
    held.release().await;
    attempt
}

/// The read-modify-write shared by `none` and `redis-lock`: plain reads, then a blind write of
/// the values computed here. Unsafe without mutual exclusion; that is the point of `none`.
async fn read_then_write(db: &Db, sale: &Sale, request: &OrderRequest, plan: &Plan) -> Result<Attempt, BuyError> {
    let mut reads = Vec::with_capacity(plan.parts.len());
    for part in &plan.parts {
        reads.push(db.read_shard(&sale.sku, part.shard).await?);
    }
    let parts = match parts_after_reads(plan, &reads) {
        Ok(parts) => parts,
        Err(short) => return Ok(short),
    };
    committed(db.commit_order(&sale.sku, request, sale.spec.per_user_limit, &parts, CommitGuard::None).await)
}
