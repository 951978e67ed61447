//! `redis-gate` and `redis-gate-durable`: Redis Lua pre-deduction, the design most flash-sale
//! services use, here as a measured peer of the owned shards, with its failure modes on show.
//!
//! # The design
//! 1. **Decide and enqueue** (`script::decide`, one Lua script, one round trip): the sale's
//!    generation, the idempotency key (a replay answers the original order), the per-user limit,
//!    the stock; then it takes the units, counts them for the user, hands out the order's
//!    **reference** (`INCR`), remembers the key and `XADD`s the order to the sale's stream.
//! 2. **Write** ([`writer`]): a consumer per instance in the group `writers` reads batches and
//!    writes each in one PostgreSQL transaction, idempotent on the reference
//!    (`orders.gate_ref` is unique per sale), then `XACK`s and `XDEL`s them; entries left
//!    unacknowledged by a dead or slow consumer are claimed (`XAUTOCLAIM`) after `claim_idle`.
//! 3. **Reconcile** ([`reconcile`]): PostgreSQL's truth per shard repairs Redis.
//!
//! `redis-gate` acknowledges after step 1 (the order is in the stream); `redis-gate-durable`
//! after step 2 (the request waits for its entry's commit, up to its deadline). A replay of an
//! idempotency key is answered under the same promise: at once in `redis-gate` (the script that
//! remembered the key also enqueued the order), and in `redis-gate-durable` only once the order
//! is in PostgreSQL. A durable request whose deadline passes first gets `503 unavailable`: the
//! order is in the stream and will most likely land, so the answer must not be `busy` ("nothing
//! was done"); the client retries with the same key and is answered the order once it landed.
//!
//! # Why one script, and the failpoint
//! A decrement script followed by a separate queue write leaves a window in which the units are
//! taken and no order exists: a process that dies there undersells, one paused there past any
//! timeout writes its order after reconciliation gave the units back (oversold), and a replay
//! of the key remembered at decision time answers an order that may never be written. One
//! script closes the window: Redis runs it atomically. The test-only failpoint
//! `SECKILL_FAILPOINT=gate-after-decrement` aborts the process right after the script, before
//! the answer ([`crate::config::Failpoint`]): the order is in the stream and another instance's
//! writer claims and writes it. `gate-pause-after-decrement` stops the process there instead,
//! until it is resumed: nothing it still holds can undo or repeat the order.
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
//! - `redis-gate` acknowledges an order PostgreSQL does not have yet.
//!
//! # Round trips per order
//! The request path costs **1 Redis round trip** (`EVALSHA`) in both modes, plus one `HGETALL`
//! per instance and sale every 100 ms to notice resets. The writer adds per batch of up to
//! [`writer::BATCH`] orders one `XREADGROUP`, one PostgreSQL commit and one pipelined
//! `XACK`+`XDEL`, with a `PUBLISH` of the batch's durable outcomes in the same pipeline.
//! `redis-gate-durable` waits for its writer's notification: the local writer fires it
//! directly, another instance's through that notice (the `notices` module); PostgreSQL is
//! asked only when no notice came within 500 ms (a lost notice), and by a replay.

mod keys;
mod notices;
pub mod reconcile;
mod registry;
pub mod script;
mod sell;
mod staged_users;
mod waiters;
pub mod writer;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use redis::aio::ConnectionManager;
use tokio_util::sync::CancellationToken;

pub use self::keys::{GROUP, GateKeys};
use self::{
    reconcile::{ReconcileError, Reconciliation},
    registry::Registry,
    script::{Decision, Seed},
    waiters::Waiters,
    writer::WriterContext,
};
use crate::{
    config::Failpoint,
    domain::{GateAck, OrderRequest, Refusal, Sale, Sku},
    selling::{BuyError, InventoryError},
    store::{Db, GateWritten, OrderRecord, StoreError},
};

/// Each seed of a sale's keys starts its references at `epoch << REF_EPOCH_SHIFT` (the sale's
/// gate epoch, raised by every seed), so 2^32 references fit in one epoch.
const REF_EPOCH_SHIFT: u32 = 32;

/// What a gate purchase came to, short of an error.
#[derive(Debug)]
pub enum GateAttempt {
    /// Acknowledged (in the stream, or in PostgreSQL when durable).
    Bought(OrderRecord),
    /// The idempotency key made this order before (in the stream, or in PostgreSQL when
    /// durable).
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
    /// Entries unacknowledged this long are claimed by another consumer.
    pub claim_idle: Duration,
    /// How often each writer looks for idle entries.
    pub claim_interval: Duration,
    /// The test-only failpoint, if enabled.
    pub failpoint: Option<Failpoint>,
}

/// How long a durable request waits for a writer's notification before it asks PostgreSQL, and
/// then between two checks: the bound on the latency of a lost notice, and on the queries a
/// waiting request costs (see the `notices` module).
const FALLBACK_POLL: Duration = Duration::from_millis(500);

/// Whether a durable wait asks PostgreSQL before waiting for a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checked {
    /// At once: a replay, whose order may have been written long ago.
    Now,
    /// After [`FALLBACK_POLL`]: a new order, which no writer can have written yet.
    NotYet,
}

/// The gate of every `redis-gate` sale on this instance.
pub struct Gate {
    redis: ConnectionManager,
    db: Db,
    settings: GateSettings,
    writer: WriterContext,
    stop: CancellationToken,
}

impl Gate {
    /// The gate; writers start with the first use of a sale. Starts this instance's subscriber
    /// to the other instances' commit notices.
    pub fn new(settings: GateSettings, client: redis::Client, redis: ConnectionManager, db: Db) -> Self {
        let waiters = Arc::new(Waiters::default());
        let stop = CancellationToken::new();
        tokio::spawn(notices::listen(client.clone(), waiters.clone(), stop.clone()));
        let writer = WriterContext {
            client,
            db: db.clone(),
            waiters,
            consumer: settings.consumer.clone(),
            claim_idle: settings.claim_idle,
            claim_interval: settings.claim_interval,
            registry: Registry::default(),
        };
        Self { redis, db, settings, writer, stop }
    }

    /// Starts this instance's writer of `sku` unless it runs (a running one is told it is still
    /// wanted, see the `registry` module). Writers stop by themselves when their sale no longer
    /// needs them.
    pub fn ensure_writer(&self, sku: &Sku) {
        if self.stop.is_cancelled() {
            return;
        }
        self.writer.registry.ensure(sku, || writer::run(sku.clone(), self.writer.clone(), self.stop.clone()));
    }

    /// The sales whose writer runs on this instance (also the gauge `seckill_gate_writers`).
    pub fn live_writers(&self) -> usize {
        self.writer.registry.len()
    }

    /// Decides and enqueues `request` in Redis (one script) and, when durable, waits for its
    /// commit; a replay is answered under the same promise.
    pub async fn buy(&self, sale: &Sale, ack: GateAck, request: &OrderRequest, deadline: Instant) -> Result<GateAttempt, BuyError> {
        let keys = GateKeys::new(&sale.sku);
        let start = rand::random_range(0..sale.spec.shards);
        let user = request.user_id.as_str();
        match script::decide(&self.redis, &keys, sale, request, start, ack).await? {
            Decision::Taken { gate_ref, parts } => {
                failpoint(self.settings.failpoint, &sale.sku, gate_ref);
                // After the script: a writer that found the stream empty and stopped meanwhile
                // is started again for this entry (see `ensure_writer`).
                self.ensure_writer(&sale.sku);
                if ack == GateAck::Database {
                    // The batch takes at least a stream read and a commit, so the entry is
                    // hardly ever written before the wait is registered; if it is, the wait's
                    // first PostgreSQL check finds it.
                    self.await_written(sale, gate_ref, user, Checked::NotYet, deadline).await?;
                }
                Ok(GateAttempt::Bought(gate_record(sale, gate_ref, user, request.quantity.get(), parts[0].0)))
            }
            Decision::Replay(prior) => {
                if prior.user_id != user || prior.quantity != request.quantity.get() {
                    return Err(BuyError::Api(InventoryError::from(Refusal::IdempotencyKeyReused)));
                }
                if ack == GateAck::Database {
                    self.ensure_writer(&sale.sku);
                    self.await_written(sale, prior.gate_ref, user, Checked::Now, deadline).await?;
                }
                Ok(GateAttempt::Replayed(gate_record(sale, prior.gate_ref, user, prior.quantity, prior.shard)))
            }
            Decision::UserLimit => Err(BuyError::UserLimit),
            Decision::SoldOut => Ok(GateAttempt::SoldOut),
            Decision::Stale => Ok(GateAttempt::SaleChanged),
            Decision::Unseeded => Ok(GateAttempt::Unseeded),
        }
    }

    /// Waits until PostgreSQL has `user`'s order `gate_ref`: a writer's notification, or a
    /// check of PostgreSQL (first when `checked` says so, then every [`FALLBACK_POLL`] for a
    /// notification that did not come). Past the deadline the order's fate is unknown: it is in
    /// the stream and may still land, so the answer is `unavailable`, not `busy`.
    async fn await_written(&self, sale: &Sale, gate_ref: i64, user: &str, checked: Checked, deadline: Instant) -> Result<(), BuyError> {
        let mut wait = self.writer.waiters.register(&sale.sku, gate_ref, user);
        let mut check_at = match checked {
            Checked::Now => Instant::now(),
            Checked::NotYet => Instant::now() + FALLBACK_POLL,
        };
        loop {
            if let Ok(outcome) = tokio::time::timeout_at(check_at.min(deadline).into(), wait.outcome()).await {
                return written(outcome);
            }
            if Instant::now() >= deadline {
                return Err(BuyError::Api(InventoryError::Store(StoreError::Unavailable(format!(
                    "order {gate_ref} of sale {} was not in PostgreSQL by the request deadline; it is queued and may still be written",
                    sale.sku
                )))));
            }
            metrics::counter!("seckill_gate_durable_polls_total").increment(1);
            if self.db.order_by_gate_ref(&sale.sku, gate_ref, user).await?.is_some() {
                return Ok(());
            }
            check_at = Instant::now() + FALLBACK_POLL;
        }
    }

    /// Seeds the sale's keys from PostgreSQL: `reset` (a create or reset) replaces them; otherwise
    /// only if Redis has none. Starts the writer.
    pub async fn seed(&self, sale: &Sale, reset: bool) -> Result<(), InventoryError> {
        let keys = GateKeys::new(&sale.sku);
        let (rows, max_ref, epoch) =
            tokio::try_join!(self.db.shard_rows(&sale.sku), self.db.max_gate_ref(&sale.sku), self.db.next_gate_epoch(&sale.sku))?;
        let users = staged_users::stage(&self.redis, &self.db, &keys, &sale.sku).await?;
        // Above every reference handed out before, also those lost with Redis before they were
        // written: a reference is never handed out twice.
        let ref_floor = max_ref.max(epoch << REF_EPOCH_SHIFT);
        let seed = Seed { stock: rows.iter().map(|r| r.remaining.max(0)).collect(), users, ref_floor };
        let wrote = script::seed(&self.redis, &keys, sale, &seed, reset).await?;
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
        reconcile::reconcile(&self.redis, &self.db, sale, drain).await
    }

    /// Stops the writers after their current batch (graceful shutdown; call after the HTTP
    /// server drained, so no durable request still waits).
    pub async fn shutdown(&self) {
        self.stop.cancel();
        for writer in self.writer.registry.drain() {
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

/// The test-only failpoints, right after the script that decided and enqueued `gate_ref`.
fn failpoint(failpoint: Option<Failpoint>, sku: &Sku, gate_ref: i64) {
    match failpoint {
        Some(Failpoint::GateAfterDecrement) => {
            tracing::error!(%sku, gate_ref, "failpoint gate-after-decrement: aborting after the decision, before the answer");
            std::process::abort();
        }
        Some(Failpoint::GatePauseAfterDecrement) => {
            tracing::error!(%sku, gate_ref, "failpoint gate-pause-after-decrement: stopping the process until SIGCONT");
            // Blocks this worker thread, which is what a pause does; the whole process stops.
            let _ = std::process::Command::new("kill").arg("-STOP").arg(std::process::id().to_string()).status();
        }
        // The owners' failpoints, or none.
        Some(Failpoint::HoldBatchAnswers | Failpoint::PanicAfterBatchCommit) | None => {}
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
