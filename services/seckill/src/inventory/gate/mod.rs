//! `redis-gate` and `redis-gate-durable`: Redis Lua pre-deduction, the design most flash-sale
//! services use, here as a measured peer of the owned shards, with its failure modes on show.
//!
//! # The design
//! 1. **Decide** (`script::decide`, one Lua script): the sale's generation, the idempotency key
//!    (a replay answers the original order), the per-user limit, the stock; then it takes the
//!    units, counts them for the user, hands out the order's **reference** (`INCR`) and records
//!    the order as *in flight*.
//! 2. **Enqueue** (`script::enqueue`, a second script): `XADD` the order to the sale's stream and
//!    clear its in-flight record.
//! 3. **Write** ([`writer`]): a consumer per instance in the group `writers` reads batches and
//!    writes each in one PostgreSQL transaction, idempotent on the reference
//!    (`orders.gate_ref` is unique per sale), then `XACK`s and `XDEL`s them; entries left
//!    unacknowledged by a dead consumer are claimed (`XAUTOCLAIM`) after `claim_idle`.
//! 4. **Reconcile** ([`reconcile`]): PostgreSQL's truth per shard repairs Redis.
//!
//! `redis-gate` acknowledges after step 2; `redis-gate-durable` after step 3 (the request waits
//! for its entry's commit, up to its deadline; past it the answer is `503 busy`, and the order may
//! still land).
//!
//! # Why two steps, and the failpoint
//! Steps 1 and 2 could be one script (Redis would then decrement and enqueue atomically). They
//! are two, on purpose: that is the usual production design (a decrement script, then a queue
//! write), and its window is the point of this peer. A process that dies between them has taken
//! the units and written no order: **undersold**. The in-flight record makes the loss visible:
//! reconciliation finds it once older than `claim_idle`, reports it, and gives the units back.
//! The test-only failpoint `SECKILL_FAILPOINT=gate-after-decrement` aborts the process exactly
//! there ([`crate::config::Failpoint`]).
//!
//! # Keys: stock per shard, in one hash
//! All of a sale's keys share one hash tag ([`GateKeys`]), so they live on one Redis node and the
//! scripts are cluster-safe; but then shards buy no parallelism in Redis (one script runs at a
//! time per node anyway), so one counter would decide just as fast. The stock is still kept per
//! shard, in one hash with a `left` total beside it (sold out is O(1)): the order's parts name
//! their shards, so the writer keeps every shard's row in PostgreSQL in step (the audit checks
//! `remaining + sold = initial` per shard) and reconciliation compares shard by shard.
//!
//! # Known costs, by design
//! - Redis failover or data loss loses decrements: keys are seeded again from PostgreSQL, which
//!   lacks the orders still in the lost stream, so the same units sell twice (**oversold**), and
//!   in `redis-gate` the acknowledged orders in that stream are lost.
//! - A crash between the two steps undersells (above).
//! - `redis-gate` acknowledges an order PostgreSQL does not have yet.
//!
//! # Round trips per order
//! The request path costs **2 Redis round trips** (`EVALSHA` decide, `EVALSHA` enqueue) in both
//! modes, plus one `HGETALL` per instance and sale every 100 ms to notice resets. The writer adds
//! per batch of up to [`writer::BATCH`] orders one `XREADGROUP`, one PostgreSQL commit and one
//! pipelined `XACK`+`XDEL`. `redis-gate-durable` waits for the local writer's notification; when
//! another instance's consumer took the entry it polls PostgreSQL every 50 ms.

mod keys;
pub mod reconcile;
pub mod script;
mod waiters;
pub mod writer;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use redis::aio::ConnectionManager;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use self::keys::{GROUP, GateKeys};
use self::{
    reconcile::{ReconcileError, Reconciliation},
    script::{Decision, Seed},
    waiters::{Wait, Waiters},
    writer::WriterContext,
};
use super::strategies::BuyError;
use crate::{
    config::Failpoint,
    domain::{GateAck, OrderRequest, Sale, Sku},
    inventory::InventoryError,
    store::{Db, GateWritten, OrderRecord},
};

/// Each seed of a sale's keys starts its references at `epoch << REF_EPOCH_SHIFT` (the sale's
/// gate epoch, raised by every seed), so 2^32 references fit in one epoch.
const REF_EPOCH_SHIFT: u32 = 32;

/// What a gate purchase came to, short of an error.
#[derive(Debug)]
pub enum GateAttempt {
    /// Acknowledged (after the stream write, or after the database write when durable).
    Bought(OrderRecord),
    /// The idempotency key made this order before.
    Replayed(OrderRecord),
    /// Fewer units left than asked.
    SoldOut,
    /// Redis holds another generation of the sale: reload it.
    SaleChanged,
    /// Redis has no keys for the sale (new to Redis, or Redis lost its data): seed them.
    Unseeded,
}

/// Settings of the gate.
#[derive(Debug, Clone)]
pub struct GateSettings {
    /// This instance's consumer name.
    pub consumer: String,
    /// Entries unacknowledged this long are claimed; in-flight orders this old count as dead.
    pub claim_idle: Duration,
    /// How often each writer looks for idle entries.
    pub claim_interval: Duration,
    /// The test-only failpoint, if enabled.
    pub failpoint: Option<Failpoint>,
}

/// How long a durable request waits for the local writer before it also polls PostgreSQL.
const LOCAL_WAIT: Duration = Duration::from_millis(50);

/// The gate of every `redis-gate` sale on this instance.
pub struct Gate {
    redis: ConnectionManager,
    db: Db,
    settings: GateSettings,
    writer: WriterContext,
    /// The writer of each sale this instance has served or created, until shutdown.
    writers: Mutex<HashMap<Sku, JoinHandle<()>>>,
    stop: CancellationToken,
}

impl Gate {
    /// The gate; writers start with the first use of a sale.
    pub fn new(settings: GateSettings, client: redis::Client, redis: ConnectionManager, db: Db) -> Self {
        let writer = WriterContext {
            client,
            db: db.clone(),
            waiters: Arc::new(Waiters::default()),
            consumer: settings.consumer.clone(),
            claim_idle: settings.claim_idle,
            claim_interval: settings.claim_interval,
        };
        Self { redis, db, settings, writer, writers: Mutex::default(), stop: CancellationToken::new() }
    }

    /// Starts this instance's writer of `sku` unless it runs.
    pub fn ensure_writer(&self, sku: &Sku) {
        let mut writers = self.writers.lock().unwrap();
        if self.stop.is_cancelled() || writers.get(sku).is_some_and(|w| !w.is_finished()) {
            return;
        }
        let handle = tokio::spawn(writer::run(sku.clone(), self.writer.clone(), self.stop.clone()));
        writers.insert(sku.clone(), handle);
    }

    /// Decides `request` in Redis, enqueues it, and (durable) waits for its commit.
    pub async fn buy(&self, sale: &Sale, ack: GateAck, request: &OrderRequest, deadline: Instant) -> Result<GateAttempt, BuyError> {
        self.ensure_writer(&sale.sku);
        let keys = GateKeys::new(&sale.sku);
        let start = rand::random_range(0..sale.spec.shards);
        let (gate_ref, parts) = match script::decide(&self.redis, &keys, sale, request, start).await? {
            Decision::Taken { gate_ref, parts } => (gate_ref, parts),
            Decision::Replay(prior) => {
                if prior.user_id != request.user_id.as_str() || prior.quantity != request.quantity.get() {
                    return Err(BuyError::Api(InventoryError::IdempotencyKeyReused));
                }
                let record = gate_record(sale, prior.gate_ref, &prior.user_id, prior.quantity, prior.shard);
                return Ok(GateAttempt::Replayed(record));
            }
            Decision::UserLimit => return Err(BuyError::UserLimit),
            Decision::SoldOut => return Ok(GateAttempt::SoldOut),
            Decision::Stale => return Ok(GateAttempt::SaleChanged),
            Decision::Unseeded => return Ok(GateAttempt::Unseeded),
        };
        if self.settings.failpoint == Some(Failpoint::GateAfterDecrement) {
            tracing::error!(sku = %sale.sku, gate_ref, "failpoint gate-after-decrement: aborting after the decrement, before the stream write");
            std::process::abort();
        }
        let wait = (ack == GateAck::Database).then(|| self.writer.waiters.register(&sale.sku, gate_ref, request.user_id.as_str()));
        // A failure here leaves the units taken and the order in flight: undersold until
        // reconciliation gives them back.
        script::enqueue(&self.redis, &keys, sale, request, gate_ref, &parts).await?;
        if let Some(wait) = wait {
            self.await_written(sale, request, gate_ref, wait, deadline).await?;
        }
        Ok(GateAttempt::Bought(gate_record(sale, gate_ref, request.user_id.as_str(), request.quantity.get(), parts[0].0)))
    }

    /// Waits until PostgreSQL has the order `gate_ref`, or the deadline passes (`busy`).
    async fn await_written(
        &self,
        sale: &Sale,
        request: &OrderRequest,
        gate_ref: i64,
        mut wait: Wait,
        deadline: Instant,
    ) -> Result<(), BuyError> {
        let mut check_at = Instant::now() + LOCAL_WAIT;
        let mut local = true;
        loop {
            let until = check_at.min(deadline);
            if local {
                match tokio::time::timeout_at(until.into(), &mut wait.written).await {
                    Ok(Ok(outcome)) => return written(outcome),
                    // The writer stopped (shutdown): only PostgreSQL can tell now.
                    Ok(Err(_)) => local = false,
                    Err(_) => {}
                }
            } else {
                tokio::time::sleep_until(until.into()).await;
            }
            if Instant::now() >= deadline {
                return Err(BuyError::Api(InventoryError::Busy));
            }
            if self.db.order_by_gate_ref(&sale.sku, gate_ref, request.user_id.as_str()).await?.is_some() {
                return Ok(());
            }
            check_at = Instant::now() + LOCAL_WAIT;
        }
    }

    /// Seeds the sale's keys from PostgreSQL: `reset` (a create or reset) replaces them; otherwise
    /// only if Redis has none. Starts the writer.
    pub async fn seed(&self, sale: &Sale, reset: bool) -> Result<(), InventoryError> {
        let (rows, users, max_ref, epoch) = tokio::try_join!(
            self.db.shard_rows(&sale.sku),
            self.db.user_purchases(&sale.sku),
            self.db.max_gate_ref(&sale.sku),
            self.db.next_gate_epoch(&sale.sku)
        )?;
        // Above every reference handed out before, also those lost with Redis before they were
        // written: a reference is never handed out twice.
        let ref_floor = max_ref.max(epoch << REF_EPOCH_SHIFT);
        let seed = Seed { stock: rows.iter().map(|r| r.remaining.max(0)).collect(), users, ref_floor };
        let wrote = script::seed(&self.redis, &GateKeys::new(&sale.sku), sale, &seed, reset).await?;
        if wrote && !reset {
            tracing::warn!(sku = %sale.sku, "gate keys were missing in redis; seeded again from postgres (orders still queued in a lost stream will oversell)");
        }
        self.ensure_writer(&sale.sku);
        Ok(())
    }

    /// Removes the sale's gate keys (the sale no longer uses the gate), so instances still
    /// holding the old definition find it unseeded instead of selling from stale keys.
    pub async fn retire(&self, sku: &Sku) -> Result<(), InventoryError> {
        let _: () = redis::AsyncCommands::del(&mut self.redis.clone(), GateKeys::new(sku).meta).await?;
        Ok(())
    }

    /// Reconciles the sale (see [`reconcile`]).
    pub async fn reconcile(&self, sale: &Sale, drain: bool) -> Result<Reconciliation, ReconcileError> {
        self.ensure_writer(&sale.sku);
        reconcile::reconcile(&self.redis, &self.db, sale, self.settings.claim_idle, drain).await
    }

    /// Stops the writers after their current batch (graceful shutdown; call after the HTTP
    /// server drained, so no durable request still waits).
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let writers: Vec<JoinHandle<()>> = self.writers.lock().unwrap().drain().map(|(_, w)| w).collect();
        for writer in writers {
            let _ = writer.await;
        }
    }
}

/// The answer for a gate order: `order_id` is its reference (what Redis handed out, known at
/// acknowledgement, and stored as `orders.gate_ref`); no fence.
fn gate_record(sale: &Sale, gate_ref: i64, user_id: &str, quantity: u32, shard: crate::domain::ShardId) -> OrderRecord {
    OrderRecord {
        order_id: gate_ref,
        sku: sale.sku.to_string(),
        user_id: user_id.to_owned(),
        quantity,
        shard,
        fence: OrderRecord::NO_FENCE,
    }
}

/// A durable request's answer from its entry's outcome.
fn written(outcome: GateWritten) -> Result<(), BuyError> {
    match outcome {
        GateWritten::Written(_) | GateWritten::Duplicate => Ok(()),
        // The sale was reset while the order was queued: it was discarded with the old sale.
        GateWritten::Stale => Err(BuyError::Api(InventoryError::Busy)),
        GateWritten::Conflict => Err(BuyError::DuplicateKey),
    }
}
