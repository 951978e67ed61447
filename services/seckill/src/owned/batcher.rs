//! The batcher of one sale owner: it takes every order decided since the last batch and commits
//! them in one transaction (`Db::commit_batch`), one batch at a time, then tells each waiting
//! request what became of its order. It runs on the batch thread (`batch_thread`), not on the
//! HTTP worker whose requests it answers. Orders decided while a batch is in flight form the next
//! one, so the batch size grows with the load and the commits per order fall; below capacity a
//! short linger (see `linger`) gathers a few more.
//!
//! A batch is sent under the claims (shard and fence) its orders were decided against, and its
//! answer is applied only to those claims: if a shard was lost and claimed again while the batch
//! was on the wire, the new claim read the stock after the batch, and the answer must not count
//! its units a second time (see `owner`).

use std::{sync::Arc, time::Duration};

use super::{
    batch_thread::BatchThread,
    linger::BATCH_FULL,
    owner::{Decided, Pending, SaleOwner},
    placement::Surrenders,
};
use crate::{
    config::Failpoint,
    domain::ShardClaim,
    store::{BatchOrder, BatchOutcome, BatchShard, CommittedBatch, Db, LockOrder, OrderOutcome, OrderRecord, OwnerWriteError},
};

/// What a batcher needs besides its owner.
#[derive(Clone)]
pub(crate) struct BatchContext {
    pub(crate) db: Db,
    /// Bound of one batch commit (below the lease).
    pub(crate) bound: Duration,
    pub(crate) surrenders: Surrenders,
    pub(crate) settings: BatchSettings,
}

/// How batches are formed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchSettings {
    /// The longest a batch waits for more orders (only while they arrive faster than this, and
    /// never once [`BATCH_FULL`] are pending).
    pub(crate) linger: Duration,
    /// Whether a batch starts only on shards whose lease outlasts the write bound (off: the
    /// control that leaves late writes to the fence alone).
    pub(crate) lease_margin: bool,
    /// In which order a batch takes users and keys (arrival order: the deadlock control).
    pub(crate) lock_order: LockOrder,
    /// How long a buyer PostgreSQL refused for the per-user limit is refused from memory, riding
    /// no batch (see `limit_refusals`).
    pub(crate) limit_refusal_trust: Duration,
    /// **Test only**: the failpoint, if one is enabled (the batcher honours `hold-batch-answers`).
    pub(crate) failpoint: Option<Failpoint>,
}

/// Orders taken for one commit, and the claims they were decided against as the owner knew them
/// when the batch was formed.
struct Batch {
    orders: Vec<Pending>,
    shards: Vec<BatchShard>,
}

impl Batch {
    fn claims(&self) -> Vec<ShardClaim> {
        self.shards.iter().map(|s| s.claim).collect()
    }
}

/// How often orders held back for a short lease look again whether the watchdog renewed it.
const HELD_RECHECK: Duration = Duration::from_millis(10);

/// How many batches that wrote nothing (contention, no connection) one order rides in before it
/// is sent back to be decided again.
const MAX_REQUEUES: u8 = 3;

/// Starts the batcher of `owner` on `thread`; it ends when the owner stops. A batcher that
/// panics (a bug) closes its owner: the orders it was committing have an unknown fate and are
/// answered so by their requests (their reply was dropped), the ones still pending are decided
/// again, and the shards go back, to be claimed again from what PostgreSQL holds.
pub(crate) fn spawn(owner: Arc<SaleOwner>, ctx: BatchContext, thread: &BatchThread) {
    let surrenders = ctx.surrenders.clone();
    let batcher = thread.spawn(run(owner.clone(), ctx));
    thread.spawn(async move {
        if let Err(e) = batcher.await
            && e.is_panic()
        {
            tracing::error!(sku = %owner.sale.sku, "the batcher panicked; closing this owner and giving its shards back");
            surrenders.send(&owner, owner.close());
        }
    });
}

/// The batcher's loop.
async fn run(owner: Arc<SaleOwner>, ctx: BatchContext) {
    let margin = if ctx.settings.lease_margin { ctx.bound } else { Duration::ZERO };
    let mut held = false;
    loop {
        tokio::select! {
            () = owner.work.notified() => {}
            () = tokio::time::sleep(HELD_RECHECK), if held => {}
            () = owner.stopped.cancelled() => return,
        }
        loop {
            linger(&owner, ctx.settings.linger).await;
            let Some(batch) = take_batch(&owner, margin) else { break };
            commit(&owner, &ctx, batch).await;
        }
        held = owner.pending_orders() > 0;
    }
}

/// Waits for more orders until the oldest pending one has waited `longest`, while they arrive
/// faster than that and fewer than a full batch are pending. Orders do not wake it one by one
/// (`SaleOwner::decide` notifies only the first order and a full batch): it looks again when the
/// stream would count as stopped.
///
/// The bound is the oldest order's wait, not the linger's own: orders decided while the previous
/// batch was in flight have waited for it already, and an order that rode a batch which wrote
/// nothing waits for nothing more.
async fn linger(owner: &SaleOwner, longest: Duration) {
    if longest.is_zero() {
        return;
    }
    loop {
        let (stops, until) = {
            let state = owner.state.lock().unwrap();
            if state.pending.len() >= BATCH_FULL {
                return;
            }
            let Some(oldest) = state.pending.iter().map(|p| p.decided_at).min() else { return };
            let now = std::time::Instant::now();
            let until = oldest + longest;
            match state.arrivals.dense_until(longest, now) {
                Some(stops) if now < until => (tokio::time::Instant::from_std(stops), tokio::time::Instant::from_std(until)),
                _ => return,
            }
        };
        tokio::select! {
            () = owner.work.notified() => {}
            () = tokio::time::sleep_until(stops.min(until)) => {}
            () = owner.stopped.cancelled() => return,
        }
    }
}

/// Everything pending that can be written now, with the claims it was decided against. Orders on
/// claims no longer owned (lost, or the shard claimed again since) are sent back for a retry.
/// Orders on a shard whose lease has less than `margin` left (the most a write may take) stay
/// pending, reserved, until the watchdog renews the lease or it is lost: a write is never started
/// that could land after its owner's lease. `None` when nothing can be written.
fn take_batch(owner: &SaleOwner, margin: Duration) -> Option<Batch> {
    let mut state = owner.state.lock().unwrap();
    let pending = std::mem::take(&mut state.pending);
    // Each claim looked at once: gone (not owned under that fence, or its lease lost), short of
    // lease, or usable.
    let (mut unusable, mut short) = (Vec::new(), Vec::new());
    for claim in touched(&pending) {
        match state.owned(claim) {
            Some(owned) if owned.is_lost() => unusable.push(claim),
            Some(owned) if !owned.outlasts(margin) => short.push(claim),
            Some(_) => {}
            None => unusable.push(claim),
        }
    }
    let on = |order: &Pending, claims: &[ShardClaim]| order.parts.iter().any(|(c, _)| claims.contains(c));
    let (held, pending): (Vec<Pending>, Vec<Pending>) = pending.into_iter().partition(|o| on(o, &short) && !on(o, &unusable));
    state.pending = held;
    let (retry, orders): (Vec<Pending>, Vec<Pending>) = pending.into_iter().partition(|o| on(o, &unusable));
    // Formed under the same lock as the checks above, so every claim sent is owned now.
    let shards = SaleOwner::batch_shards(&state, &touched(&orders));
    drop(state);
    if !unusable.is_empty() {
        // Lost leases are noticed here even before the watchdog or the loss watcher ran.
        owner.forget(&unusable);
    }
    for order in retry {
        owner.give_back(&order);
        let _ = order.reply.send(Decided::Retry);
    }
    (!orders.is_empty()).then_some(Batch { orders, shards })
}

/// The claims `orders` take units from, each once, ascending.
fn touched(orders: &[Pending]) -> Vec<ShardClaim> {
    let mut claims: Vec<ShardClaim> = orders.iter().flat_map(|o| o.parts.iter().map(|(c, _)| *c)).collect();
    claims.sort_unstable();
    claims.dedup();
    claims
}

async fn commit(owner: &Arc<SaleOwner>, ctx: &BatchContext, batch: Batch) {
    let sale = &owner.sale;
    let orders: Vec<BatchOrder<'_>> = batch.orders.iter().map(|o| BatchOrder { request: &o.request, parts: &o.parts }).collect();
    metrics::histogram!("seckill_batch_orders").record(orders.len() as f64);
    let outcome = ctx.db.commit_batch(sale, owner.fencing, ctx.settings.lock_order, &batch.shards, &orders, ctx.bound).await;
    drop(orders);
    match ctx.settings.failpoint {
        Some(Failpoint::HoldBatchAnswers) => crate::lab::failpoint::batch_answers_released().await,
        Some(Failpoint::PanicAfterBatchCommit) if crate::lab::failpoint::first_panic_after_commit() => {
            panic!("failpoint panic-after-batch-commit: the batch is committed, none of its orders answered")
        }
        _ => {}
    }
    match outcome {
        Ok(BatchOutcome::Committed(written)) => committed(owner, ctx, batch, written),
        Ok(BatchOutcome::Deposed(deposed)) => {
            metrics::counter!("seckill_fence_rejections_total").increment(1);
            // The shards the store refused, under the fences this batch was sent with.
            let deposed: Vec<ShardClaim> = batch.claims().into_iter().filter(|c| deposed.contains(&c.shard)).collect();
            tracing::warn!(sku = %sale.sku, ?deposed, "batch refused by the fence: deposed; forgetting those claims");
            owner.forget(&deposed);
            let mut state = owner.state.lock().unwrap();
            let (retry, again): (Vec<Pending>, Vec<Pending>) =
                batch.orders.into_iter().partition(|o| o.parts.iter().any(|(c, _)| deposed.contains(c)));
            // Orders on claims still ours keep their reservations and go into the next batch
            // (which checks their claims again).
            let later = std::mem::replace(&mut state.pending, again);
            state.pending.extend(later);
            drop(state);
            for order in retry {
                owner.give_back(&order);
                let _ = order.reply.send(Decided::Retry);
            }
        }
        Ok(BatchOutcome::StaleSale) => {
            tracing::info!(sku = %sale.sku, "sale was reset; dropping the previous generation's shards");
            ctx.surrenders.send(owner, owner.close());
            for order in batch.orders {
                let _ = order.reply.send(Decided::Retry);
            }
        }
        Err(e) if e.wrote_nothing() => requeue(owner, batch.orders, &e),
        Err(e) => {
            // Unknown fate (it may still land: the fence decides then) or a failure: acknowledge
            // nothing, and let the claims go, since an owner that cannot write cannot sell.
            let batch_claims = batch.claims();
            let batch = batch.orders;
            tracing::warn!(sku = %sale.sku, error = %e, orders = batch.len(), "batch commit failed; giving the shards back");
            owner.forget(&batch_claims);
            ctx.surrenders.database_trouble();
            let failure = crate::selling::InventoryError::from(crate::store::StoreError::from(e));
            for order in batch {
                let _ = order.reply.send(Decided::Failed(failure.clone()));
            }
        }
    }
}

/// A batch known to have written nothing while the database answers (it lost to another
/// transaction, or no connection came free): its orders keep their reservations and go first
/// into the next batch, and the shards stay owned. An order that rode in [`MAX_REQUEUES`] such
/// batches is sent back to be decided again, which its request's deadline bounds.
fn requeue(owner: &SaleOwner, batch: Vec<Pending>, why: &OwnerWriteError) {
    metrics::counter!("seckill_batch_requeued_total").increment(1);
    tracing::info!(sku = %owner.sale.sku, error = %why, orders = batch.len(), "batch wrote nothing; its orders go into the next one");
    let (again, decide_again): (Vec<Pending>, Vec<Pending>) = batch.into_iter().partition(|o| o.requeued < MAX_REQUEUES);
    let mut state = owner.state.lock().unwrap();
    let later = std::mem::take(&mut state.pending);
    state.pending = again.into_iter().map(|o| Pending { requeued: o.requeued + 1, ..o }).collect();
    state.pending.extend(later);
    drop(state);
    for order in decide_again {
        owner.give_back(&order);
        let _ = order.reply.send(Decided::Retry);
    }
    owner.work.notify_one();
}

/// Applies a committed batch to memory (its orders, and the returns it folded) and answers its
/// orders.
fn committed(owner: &Arc<SaleOwner>, ctx: &BatchContext, batch: Batch, written: CommittedBatch) {
    let sale = &owner.sale;
    let claims = batch.claims();
    let mut state = owner.state.lock().unwrap();
    for (shard, units) in &written.returned {
        // Under the claim the batch was sent with: the store folded them for that fence.
        if let Some(owned) = claims.iter().find(|c| c.shard == *shard).and_then(|c| state.owned_mut(*c)) {
            owned.committed += units;
            owned.available += units;
        }
    }
    let mut replies = Vec::with_capacity(batch.orders.len());
    for (order, outcome) in batch.orders.into_iter().zip(written.orders) {
        let decided = match outcome {
            OrderOutcome::Accepted(order_id) => {
                // Only the claims it was written under: a shard claimed again meanwhile read
                // the stock after this batch.
                for (claim, take) in &order.parts {
                    if let Some(owned) = state.owned_mut(*claim) {
                        owned.committed -= i64::from(*take);
                    }
                }
                let (first, _) = order.parts[0];
                Decided::Committed(OrderRecord {
                    order_id,
                    sku: sale.sku.to_string(),
                    user_id: order.request.user_id.to_string(),
                    quantity: order.request.quantity.get(),
                    shard: first.shard,
                    fence: first.fence,
                })
            }
            OrderOutcome::UserLimit => Decided::UserLimit,
            OrderOutcome::Earlier(record) => Decided::Earlier(record),
            OrderOutcome::Duplicate => Decided::Duplicate,
        };
        if !matches!(decided, Decided::Committed(_)) {
            // Refused: its units go back to memory.
            for (claim, take) in &order.parts {
                if let Some(owned) = state.owned_mut(*claim) {
                    owned.available += i64::from(*take);
                }
            }
        }
        replies.push((order.reply, decided));
    }
    drop(state);
    for (reply, decided) in replies {
        let _ = reply.send(decided);
    }
    // Empty shards go back at once (and everyone is told they are empty), retiring ones as soon
    // as their last reserved units are committed.
    ctx.surrenders.send(owner, owner.finished_shards());
}
