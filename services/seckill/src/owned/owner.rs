//! The owner of a sale's shards on this instance: the shards it holds the locks of, their stock in
//! memory, and the orders decided against that stock and not yet committed.
//!
//! Stock per shard is kept twice: `committed` is what PostgreSQL has (the owner wrote it last),
//! `available` is `committed` minus every unit reserved by an order waiting for its batch. A
//! decision is a reservation against `available`; only the batcher moves `committed`.
//!
//! Memory is keyed by shard, and every change that comes from outside a decision (a batch's
//! outcome, a refusal, a lost lease, a returned reservation) names the [`ShardClaim`] it concerns
//! and touches the shard only while it is still owned under that fence. A shard can be lost and
//! claimed again while a batch of the earlier claim is on the wire; that batch's answer then
//! belongs to memory that no longer exists, and the new claim already read what it wrote.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use lockkit::{Fence, LockGuard};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use super::{
    limit_refusals::LimitRefusals,
    linger::{Arrivals, BATCH_FULL},
};
use crate::{
    domain::Sale,
    domain::{Fencing, OrderRequest, ShardClaim, ShardId},
    selling::InventoryError,
    store::{BatchShard, OrderRecord},
};

/// One owned shard, as an operator sees it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OwnedShardView {
    /// The shard.
    pub shard: ShardId,
    /// The fence this instance claimed it with.
    pub fence: Fence,
    /// Stock as last committed.
    pub committed: i64,
    /// Stock not reserved by orders waiting for their batch.
    pub available: i64,
}

/// What a request waiting on its batch is told.
#[derive(Debug)]
pub(crate) enum Decided {
    /// Committed under the owner's fence.
    Committed(OrderRecord),
    /// The per-user limit refused it.
    UserLimit,
    /// Its idempotency key belongs to this committed order.
    Earlier(OrderRecord),
    /// Its idempotency key was used already, by an order the batch did not read.
    Duplicate,
    /// Nothing was written (the shard was lost or the batch refused): decide again elsewhere.
    Retry,
    /// The batch failed or its fate is unknown: answer this, never retry (it may still land).
    Failed(InventoryError),
}

/// An order decided against memory, waiting for its batch.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) request: OrderRequest,
    /// Units per shard, ascending, each under the claim it was reserved from.
    pub(crate) parts: Vec<(ShardClaim, u32)>,
    pub(crate) reply: oneshot::Sender<Decided>,
    /// How many batches carrying it wrote nothing (lost to contention, or found no connection).
    pub(crate) requeued: u8,
    /// When it was decided: a batch lingers for no order longer than the linger.
    pub(crate) decided_at: Instant,
}

/// One owned shard.
#[derive(Debug)]
pub(crate) struct OwnedShard {
    pub(crate) fence: Fence,
    pub(crate) committed: i64,
    pub(crate) available: i64,
    pub(crate) last_used: Instant,
    /// When this instance took it.
    owned_since: Instant,
    /// Handed back once its reserved units are committed; decides nothing new meanwhile.
    retiring: bool,
    guard: LockGuard,
    /// Stops the task that watches the lease for loss.
    watch: CancellationToken,
}

impl OwnedShard {
    /// This ownership of `shard`.
    pub(crate) fn claim(&self, shard: ShardId) -> ShardClaim {
        ShardClaim { shard, fence: self.fence }
    }

    /// Units reserved by orders not yet committed.
    pub(crate) fn reserved(&self) -> i64 {
        self.committed - self.available
    }

    /// Whether the lease is lost (the local deadline passed, or the watchdog was told so).
    pub(crate) fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Whether the lease is known to last at least `write` more: a write bounded by `write` and
    /// started now ends (lands or is cut off) while this instance still owns the shard.
    pub(crate) fn outlasts(&self, write: Duration) -> bool {
        self.guard.remaining() >= write
    }
}

/// A shard given up: release its lock (in the background if dropped).
#[derive(Debug)]
pub(crate) struct Surrendered {
    pub(crate) shard: ShardId,
    pub(crate) guard: LockGuard,
    /// Whether its stock is known to be gone (so everyone can stop probing it).
    pub(crate) empty: bool,
}

#[derive(Debug)]
pub(crate) struct State {
    /// At most one ownership per shard; see [`State::owned`] for how it is reached.
    pub(crate) shards: BTreeMap<ShardId, OwnedShard>,
    pub(crate) pending: Vec<Pending>,
    /// How fast orders are decided, for the batcher's linger.
    pub(crate) arrivals: Arrivals,
    /// Buyers PostgreSQL refused for the per-user limit a moment ago.
    limit_refusals: LimitRefusals,
    /// Set when the owner stops (sale reset, shutdown): nothing more is decided here.
    pub(crate) closed: bool,
}

impl State {
    fn new(limit_refusal_trust: Duration) -> Self {
        Self {
            shards: BTreeMap::new(),
            pending: Vec::new(),
            arrivals: Arrivals::default(),
            limit_refusals: LimitRefusals::new(limit_refusal_trust),
            closed: false,
        }
    }

    /// The shard, if it is still owned under `claim`'s fence.
    pub(crate) fn owned(&self, claim: ShardClaim) -> Option<&OwnedShard> {
        self.shards.get(&claim.shard).filter(|owned| owned.fence == claim.fence)
    }

    /// The shard, if it is still owned under `claim`'s fence.
    pub(crate) fn owned_mut(&mut self, claim: ShardClaim) -> Option<&mut OwnedShard> {
        self.shards.get_mut(&claim.shard).filter(|owned| owned.fence == claim.fence)
    }

    /// Returns the units `order` reserved, to the claims it reserved them from that are still
    /// owned (a claim lost since took its memory with it).
    fn give_back(&mut self, order: &Pending) {
        for (claim, take) in &order.parts {
            if let Some(owned) = self.owned_mut(*claim) {
                owned.available += i64::from(*take);
            }
        }
    }
}

/// This instance's ownership of one generation of one sale.
#[derive(Debug)]
pub(crate) struct SaleOwner {
    pub(crate) sale: Sale,
    pub(crate) fencing: Fencing,
    pub(crate) state: Mutex<State>,
    /// Wakes the batcher when an order is pending.
    pub(crate) work: Notify,
    /// One shard acquisition at a time per sale and instance (see `Placement::take_shard`).
    pub(crate) acquiring: tokio::sync::Mutex<()>,
    /// Cancelled when the owner stops; ends its batcher.
    pub(crate) stopped: CancellationToken,
    /// Shards adopted so far.
    adopted: AtomicU64,
    /// When a request last came for this sale (an idle owner without shards is freed).
    touched: Mutex<Instant>,
}

impl SaleOwner {
    /// The owner of `sale` on this instance, remembering limit refusals for `limit_refusal_trust`.
    pub(crate) fn new(sale: Sale, fencing: Fencing, limit_refusal_trust: Duration) -> Arc<Self> {
        Arc::new(Self {
            sale,
            fencing,
            state: Mutex::new(State::new(limit_refusal_trust)),
            work: Notify::new(),
            acquiring: tokio::sync::Mutex::new(()),
            stopped: CancellationToken::new(),
            adopted: AtomicU64::new(0),
            touched: Mutex::new(Instant::now()),
        })
    }

    /// Notes that a request came for this sale.
    pub(crate) fn touch(&self) {
        *self.touched.lock().unwrap() = Instant::now();
    }

    /// Whether nothing is owned or pending here, and no request came for `idle`.
    pub(crate) fn is_idle(&self, idle: Duration) -> bool {
        let state = self.state.lock().unwrap();
        state.shards.is_empty() && state.pending.is_empty() && self.touched.lock().unwrap().elapsed() >= idle
    }

    /// Whether PostgreSQL refused this buyer as many units or fewer a moment ago (see
    /// `limit_refusals`): the request is refused without a batch.
    pub(crate) fn refuses_for_limit(&self, request: &OrderRequest) -> bool {
        self.state.lock().unwrap().limit_refusals.refuses(&request.user_id, request.quantity.get(), Instant::now())
    }

    /// Notes that PostgreSQL refused `request` for the per-user limit.
    pub(crate) fn limit_refused(&self, request: &OrderRequest) {
        self.state.lock().unwrap().limit_refusals.record(&request.user_id, request.quantity.get(), Instant::now());
    }

    /// Decides `request` against memory: reserves its units and queues it for the next batch.
    /// `None` when the owned shards do not hold enough (or the owner stopped).
    pub(crate) fn decide(&self, request: &OrderRequest) -> Option<oneshot::Receiver<Decided>> {
        let mut state = self.state.lock().unwrap();
        if state.closed {
            return None;
        }
        let parts = reserve(&mut state.shards, i64::from(request.quantity.get()))?;
        let (reply, decided) = oneshot::channel();
        let now = Instant::now();
        state.pending.push(Pending { request: request.clone(), parts, reply, requeued: 0, decided_at: now });
        state.arrivals.record(now);
        // The batcher needs a wake-up for the first order (it may be idle) and for a full batch
        // (it may be lingering); the orders in between would only wake it, often on another
        // thread, to see that it should go on waiting.
        let wake = state.pending.len() == 1 || state.pending.len() == BATCH_FULL;
        drop(state);
        if wake {
            self.work.notify_one();
        }
        Some(decided)
    }

    /// Takes a claimed shard into memory and starts watching its lease: when it is lost, the
    /// shard is forgotten at once and nothing more is decided against it. A closed owner takes
    /// nothing: the shard comes back, to be released.
    pub(crate) fn adopt(self: &Arc<Self>, shard: ShardId, guard: LockGuard, remaining: i64) -> Result<(), Surrendered> {
        if self.state.lock().unwrap().closed {
            return Err(Surrendered { shard, guard, empty: false });
        }
        let watch = CancellationToken::new();
        let lost = guard.lost();
        let fence = guard.fence();
        let claim = ShardClaim { shard, fence };
        let (owner, stop) = (Arc::downgrade(self), watch.clone());
        tokio::spawn(async move {
            tokio::select! {
                cause = lost => {
                    if let Some(owner) = owner.upgrade() {
                        tracing::warn!(sku = %owner.sale.sku, %claim, ?cause, "shard lease lost; forgetting its stock");
                        owner.forget(&[claim]);
                    }
                }
                () = stop.cancelled() => {}
            }
        });
        let now = Instant::now();
        let owned = OwnedShard {
            fence,
            committed: remaining,
            available: remaining,
            last_used: now,
            owned_since: now,
            retiring: false,
            guard,
            watch,
        };
        let mut state = self.state.lock().unwrap();
        if state.closed {
            // Closed while the watcher started: it is stopped with the shard handed back.
            drop(state);
            return Err(surrendered(shard, owned));
        }
        state.shards.insert(shard, owned);
        drop(state);
        self.adopted.fetch_add(1, Ordering::Release);
        tracing::debug!(sku = %self.sale.sku, %shard, %fence, remaining, "shard owned");
        Ok(())
    }

    /// Orders decided and waiting for the next batch.
    pub(crate) fn pending_orders(&self) -> usize {
        self.state.lock().unwrap().pending.len()
    }

    /// How many shards were adopted so far (to tell whether one was while waiting).
    pub(crate) fn adoptions(&self) -> u64 {
        self.adopted.load(Ordering::Acquire)
    }

    /// Drops `claims` from memory (lost, deposed or unreachable) where the shard is still
    /// owned under that fence: a newer claim of the same shard is left alone. Their pending
    /// orders are routed again, and their locks released in the background (owner-checked,
    /// harmless if already gone).
    pub(crate) fn forget(&self, claims: &[ShardClaim]) {
        let mut state = self.state.lock().unwrap();
        for claim in claims {
            if state.owned(*claim).is_some() {
                let owned = state.shards.remove(&claim.shard).expect("owned under this claim");
                owned.watch.cancel();
                drop(owned.guard);
            }
        }
        let (retry, keep): (Vec<Pending>, Vec<Pending>) =
            std::mem::take(&mut state.pending).into_iter().partition(|o| o.parts.iter().any(|(c, _)| claims.contains(c)));
        state.pending = keep;
        for order in &retry {
            state.give_back(order);
        }
        drop(state);
        for order in retry {
            let _ = order.reply.send(Decided::Retry);
        }
    }

    /// Returns the units `order` reserved to the claims still owned (forgotten ones are gone
    /// with their memory).
    pub(crate) fn give_back(&self, order: &Pending) {
        self.state.lock().unwrap().give_back(order);
    }

    /// Marks up to `n` more shards retiring, the longest held first: they decide no new order
    /// and go back once what they reserved is committed. Returns them.
    pub(crate) fn retire(&self, n: usize) -> Vec<ShardId> {
        let mut state = self.state.lock().unwrap();
        let mut held: Vec<(Instant, ShardId)> =
            state.shards.iter().filter(|(_, s)| !s.retiring && s.available > 0).map(|(id, s)| (s.owned_since, *id)).collect();
        held.sort_unstable();
        let chosen: Vec<ShardId> = held.into_iter().take(n).map(|(_, id)| id).collect();
        for id in &chosen {
            if let Some(owned) = state.shards.get_mut(id) {
                owned.retiring = true;
            }
        }
        chosen
    }

    /// Takes out every shard with nothing reserved that is retiring or unused since `idle_before`.
    pub(crate) fn surrender(&self, idle_before: Instant) -> Vec<Surrendered> {
        let mut state = self.state.lock().unwrap();
        take_unreserved(&mut state.shards, |s| s.retiring || s.last_used < idle_before)
    }

    /// Shards whose work is done: nothing reserved, and empty or retiring.
    pub(crate) fn finished_shards(&self) -> Vec<Surrendered> {
        let mut state = self.state.lock().unwrap();
        take_unreserved(&mut state.shards, |s| s.committed <= 0 || s.retiring)
    }

    /// How long the longest-held shard still selling here has been owned.
    pub(crate) fn longest_held(&self) -> Option<std::time::Duration> {
        let state = self.state.lock().unwrap();
        state.shards.values().filter(|s| !s.retiring && s.available > 0).map(|s| s.owned_since.elapsed()).max()
    }

    /// Stops deciding and hands every shard back (sale reset, shutdown). Orders still pending
    /// are routed again.
    pub(crate) fn close(&self) -> Vec<Surrendered> {
        self.stopped.cancel();
        let mut state = self.state.lock().unwrap();
        state.closed = true;
        let pending = std::mem::take(&mut state.pending);
        let shards = std::mem::take(&mut state.shards);
        drop(state);
        for order in pending {
            let _ = order.reply.send(Decided::Retry);
        }
        shards.into_iter().map(|(shard, owned)| surrendered(shard, owned)).collect()
    }

    /// Shards still selling here, for the fair-share count.
    pub(crate) fn stocked_shards(&self) -> usize {
        self.state.lock().unwrap().shards.values().filter(|s| !s.retiring && s.available > 0).count()
    }

    /// What a batch must know of each claim it touches, while still owned.
    pub(crate) fn batch_shards(state: &State, claims: &[ShardClaim]) -> Vec<BatchShard> {
        let now = SystemTime::now();
        claims
            .iter()
            .filter_map(|claim| {
                state.owned(*claim).map(|s| BatchShard { claim: *claim, committed: s.committed, lease_until: now + s.guard.remaining() })
            })
            .collect()
    }

    /// The owned shards, as operators see them.
    pub(crate) fn snapshot(&self) -> Vec<OwnedShardView> {
        let state = self.state.lock().unwrap();
        state
            .shards
            .iter()
            .map(|(id, s)| OwnedShardView { shard: *id, fence: s.fence, committed: s.committed, available: s.available })
            .collect()
    }

    /// Whether `shard` is owned here now.
    pub(crate) fn owns(&self, shard: ShardId) -> bool {
        self.state.lock().unwrap().shards.contains_key(&shard)
    }

    /// Whether any shard is owned here now.
    pub(crate) fn owns_any(&self) -> bool {
        !self.state.lock().unwrap().shards.is_empty()
    }
}

/// Takes out the shards with nothing reserved that `done` selects, to hand them back.
fn take_unreserved(shards: &mut BTreeMap<ShardId, OwnedShard>, done: impl Fn(&OwnedShard) -> bool) -> Vec<Surrendered> {
    let ids: Vec<ShardId> = shards.iter().filter(|(_, s)| s.reserved() == 0 && done(s)).map(|(id, _)| *id).collect();
    ids.into_iter().filter_map(|shard| shards.remove(&shard).map(|owned| surrendered(shard, owned))).collect()
}

fn surrendered(shard: ShardId, owned: OwnedShard) -> Surrendered {
    owned.watch.cancel();
    Surrendered { shard, empty: owned.committed <= 0, guard: owned.guard }
}

/// Reserves `quantity` units: from the single shard with the least stock that has enough (so
/// shards empty and are handed back early), else gathered over several in ascending order.
fn reserve(shards: &mut BTreeMap<ShardId, OwnedShard>, quantity: i64) -> Option<Vec<(ShardClaim, u32)>> {
    let now = Instant::now();
    let usable = |s: &OwnedShard| s.available > 0 && !s.retiring && !s.is_lost();
    let single = shards.iter().filter(|(_, s)| usable(s) && s.available >= quantity).min_by_key(|(_, s)| s.available).map(|(id, _)| *id);
    let plan: Vec<(ShardId, i64)> = match single {
        Some(id) => vec![(id, quantity)],
        None => {
            let mut need = quantity;
            let mut parts = Vec::new();
            for (id, s) in shards.iter().filter(|(_, s)| usable(s)) {
                let take = s.available.min(need);
                parts.push((*id, take));
                need -= take;
                if need == 0 {
                    break;
                }
            }
            if need > 0 {
                return None;
            }
            parts
        }
    };
    let mut parts = Vec::with_capacity(plan.len());
    for (id, take) in plan {
        let owned = shards.get_mut(&id).expect("planned from these shards");
        owned.available -= take;
        owned.last_used = now;
        parts.push((owned.claim(id), take as u32));
    }
    Some(parts)
}
