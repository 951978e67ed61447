//! `owned-shards` (and its control, `owned-unfenced`): leases used to **own state**.
//!
//! An instance owns a shard while it holds the shard's lockkit lock (the watchdog renews a short
//! lease). On taking it, the owner claims the row with the lock's fence (`fence < t`, set
//! `fence = t`) and loads the stock into memory. From then on orders are decided against memory,
//! with no Redis or PostgreSQL round trip per decision, and committed in batches: one transaction
//! writes everything decided since the last batch, each shard's stock as an absolute value
//! **guarded by the fence** (`WHERE fence = t`). A client is answered only after the commit.
//!
//! When the lease is lost, or a batch write matches no row because a newer owner claimed the
//! shard, the owner forgets the shard at once; its pending orders are decided again elsewhere.
//! That fence is what stops a deposed owner's batch that was already on the wire when the lease
//! ran out: no local check can. `owned-unfenced` lacks exactly that predicate, and oversells
//! under a delayed packet.
//!
//! | file | concept |
//! |---|---|
//! | `owner` | one sale's owned shards, their memory, decisions (reservations) |
//! | `batcher` | committing decided orders in batches and answering them |
//! | `batch_thread` | the thread the batchers and their connections run on |
//! | `linger` | how long a batch waits for more orders |
//! | `limit_refusals` | buyers just refused for the per-user limit, refused again from memory |
//! | `placement` | taking free shards, giving them back (empty, idle, fair share), heartbeats |

mod batch_thread;
mod batcher;
mod limit_refusals;
mod linger;
mod owner;
mod placement;
mod sell;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use redis::aio::ConnectionManager;
use tokio_util::sync::CancellationToken;

pub use self::owner::OwnedShardView;
use self::{
    batch_thread::BatchThread,
    batcher::BatchContext,
    owner::{Decided, SaleOwner},
    placement::{Placement, Taken},
};
pub(crate) use self::{batch_thread::THREAD_NAME as BATCH_THREAD, batcher::BatchSettings, placement::PlacementSettings};
use crate::{
    domain::Sale,
    domain::{Fencing, OrderRequest, Sku},
    selling::{BuyError, Hints, InventoryError, ShardLocks},
    store::{Db, OrderRecord},
};

/// What an owned purchase came to, short of an error.
#[derive(Debug)]
pub enum OwnedAttempt {
    /// Committed.
    Bought(OrderRecord),
    /// The request's idempotency key belongs to this committed order: the caller answers the
    /// replay, or refuses the key's reuse.
    Earlier(OrderRecord),
    /// Neither memory nor a free shard has the units now; the caller checks whether the sale is
    /// sold out, and otherwise asks the other instances for stock and tries again.
    NoStock,
    /// The sale was reset under this instance: reload it and decide again.
    SaleChanged,
}

/// The owned shards of every sale on this instance.
pub struct OwnedShards {
    placement: Arc<Placement>,
    batch: BatchContext,
    batch_thread: BatchThread,
    owners: Mutex<HashMap<Sku, Arc<SaleOwner>>>,
    stop: CancellationToken,
}

impl OwnedShards {
    /// Starts ownership for this instance, with its background rebalancing and heartbeat, and
    /// its batches formed by `batches` and committed on a thread of their own (`batch_thread`).
    pub(crate) fn start(
        settings: PlacementSettings,
        batches: BatchSettings,
        db: Db,
        locks: ShardLocks,
        hints: Hints,
        redis: ConnectionManager,
    ) -> std::io::Result<Arc<Self>> {
        let write_bound = settings.write_bound;
        let interval = settings.interval;
        let batch_thread = BatchThread::start(write_bound)?;
        let placement = Placement::new(settings, db.clone(), locks, hints, redis);
        let batch = BatchContext { db, bound: write_bound, surrenders: placement.surrenders().clone(), settings: batches };
        let owned = Arc::new(Self { placement, batch, batch_thread, owners: Mutex::default(), stop: CancellationToken::new() });
        tokio::spawn(rebalance_loop(Arc::downgrade(&owned), owned.stop.clone(), interval));
        Ok(owned)
    }

    /// This instance's id (heartbeats, requests for stock).
    pub fn instance(&self) -> &str {
        self.placement.instance()
    }

    /// Sells `request` from owned shards before `deadline`, taking a free shard when memory has
    /// too little.
    pub async fn buy(&self, sale: &Sale, fencing: Fencing, request: &OrderRequest, deadline: Instant) -> Result<OwnedAttempt, BuyError> {
        let owner = self.owner_for(sale, fencing);
        loop {
            if Instant::now() >= deadline {
                return Err(BuyError::Api(InventoryError::Busy));
            }
            if owner.refuses_for_limit(request) {
                return Err(BuyError::UserLimit);
            }
            if let Some(decided) = owner.decide(request) {
                match decided.await {
                    Ok(Decided::Committed(record)) => return Ok(OwnedAttempt::Bought(record)),
                    Ok(Decided::UserLimit) => {
                        owner.limit_refused(request);
                        return Err(BuyError::UserLimit);
                    }
                    Ok(Decided::Earlier(record)) => return Ok(OwnedAttempt::Earlier(record)),
                    Ok(Decided::Duplicate) => return Err(BuyError::DuplicateKey),
                    Ok(Decided::Failed(e)) => return Err(BuyError::Api(e)),
                    Ok(Decided::Retry) => continue,
                    // The batcher dropped the order unanswered: it panicked, possibly past the
                    // commit. Deciding it again could sell it twice; its fate is unknown.
                    Err(_) => {
                        return Err(BuyError::Api(InventoryError::Bug(
                            "the order's batch ended without an answer (the batcher failed); it may have been committed".into(),
                        )));
                    }
                }
            }
            if owner.stopped.is_cancelled() {
                return Ok(OwnedAttempt::SaleChanged);
            }
            // Boxed: taking a shard (a lock and PostgreSQL) is rare, and unboxed its future would
            // be carried by every order's.
            match tokio::time::timeout_at(deadline.into(), Box::pin(self.placement.take_shard(&owner))).await {
                Err(_) => return Err(BuyError::Api(InventoryError::Busy)),
                Ok(taken) => match taken? {
                    Taken::Shard => {}
                    Taken::Nothing => return Ok(OwnedAttempt::NoStock),
                },
            }
        }
    }

    /// The sales this instance keeps an owner (and its batcher) for: what the gauge
    /// `seckill_sale_owners` shows, for this instance alone where a process runs several.
    pub fn sale_owners(&self) -> usize {
        self.owners.lock().unwrap().len()
    }

    /// Placement's entries about sales (the gauge `seckill_placement_entries`), for this
    /// instance alone.
    pub fn placement_entries(&self) -> usize {
        self.placement.entries()
    }

    /// Tells the other instances that this one needs stock of `sku`.
    pub async fn ask_for_stock(&self, sku: &Sku) -> Result<(), InventoryError> {
        self.placement.ask_for_stock(sku).await
    }

    /// The shards of `sku` this instance owns now.
    pub fn ownership(&self, sku: &Sku) -> Vec<OwnedShardView> {
        let owner = self.owners.lock().unwrap().get(sku).cloned();
        owner.map_or_else(Vec::new, |owner| owner.snapshot())
    }

    /// Stops deciding and releases every owned shard (graceful shutdown). Call after the HTTP
    /// server drained its requests, so every decided order has been committed and answered.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let owners: Vec<Arc<SaleOwner>> = self.owners.lock().unwrap().drain().map(|(_, o)| o).collect();
        for owner in owners {
            for surrendered in owner.close() {
                if let Err(e) = surrendered.guard.release().await {
                    tracing::warn!(sku = %owner.sale.sku, shard = %surrendered.shard, error = %e, "shard release at shutdown failed; it expires with its lease");
                }
            }
        }
    }

    /// Frees the owners of sales nothing happened to for a while (sold out here, deleted, or
    /// simply no longer ordered), and what placement kept about sales that it no longer needs.
    fn free_idle_owners(&self) {
        let idle = self.placement.owner_idle();
        let mut owners = self.owners.lock().unwrap();
        owners.retain(|sku, owner| {
            let free = owner.is_idle(idle);
            if free {
                tracing::debug!(%sku, "freeing the idle owner of this sale");
                self.batch.surrenders.send(owner, owner.close());
            }
            !free
        });
        metrics::gauge!("seckill_sale_owners").set(owners.len() as f64);
        drop(owners);
        self.placement.prune();
        metrics::gauge!("seckill_placement_entries").set(self.placement.entries() as f64);
    }

    /// The owner of this generation of the sale; a previous generation's owner is closed.
    fn owner_for(&self, sale: &Sale, fencing: Fencing) -> Arc<SaleOwner> {
        let mut owners = self.owners.lock().unwrap();
        if let Some(owner) = owners.get(&sale.sku).filter(|o| o.sale.generation == sale.generation && !o.stopped.is_cancelled()) {
            owner.touch();
            return owner.clone();
        }
        let owner = SaleOwner::new(sale.clone(), fencing, self.batch.settings.limit_refusal_trust);
        if let Some(previous) = owners.insert(sale.sku.clone(), owner.clone()) {
            self.batch.surrenders.send(&previous, previous.close());
        }
        batcher::spawn(owner.clone(), self.batch.clone(), &self.batch_thread);
        owner
    }
}

/// Looks at idle shards and other instances' requests for stock every `interval`, and renews the
/// heartbeat every ten of them, while this instance sells an owned sale.
async fn rebalance_loop(owned: std::sync::Weak<OwnedShards>, stop: CancellationToken, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_heartbeat = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let Some(owned) = owned.upgrade() else { return };
        owned.free_idle_owners();
        let owners: Vec<Arc<SaleOwner>> = owned.owners.lock().unwrap().values().cloned().collect();
        if owners.is_empty() {
            // No owned sale here: nothing to give back, and no share of any to count.
            continue;
        }
        if last_heartbeat.is_none_or(|at: Instant| at.elapsed() >= interval * 10) {
            last_heartbeat = Some(Instant::now());
            if let Err(e) = owned.placement.heartbeat().await {
                tracing::debug!(error = %e, "heartbeat failed");
            }
        }
        if let Err(e) = owned.placement.rebalance(&owners).await {
            tracing::debug!(error = %e, "rebalancing failed; trying again next tick");
        }
    }
}
