//! Placement: which instance owns which shard, decided by the shard locks alone.
//!
//! - **Taking.** An instance takes a free shard that still holds stock when its demand needs one
//!   (`try_lock`, never waiting on a held shard), claims the row with the lock's fence and loads
//!   its stock. One acquisition runs at a time per sale and instance; a shard found held is not
//!   probed again for a moment, so the tail of a sale costs few Redis commands.
//! - **Giving back.** A shard goes back when it is empty (its hint is set to 0, so nobody probes
//!   it again), when it has been idle for `idle_release`, on shutdown, and when another instance
//!   asks for stock while this one holds more than its fair share (the shards with stock divided
//!   by the live instances, each of which keeps a heartbeat in Redis) or has held its shard for
//!   [`HOLD_SLICE`] (turns). A shard given back while busy first *retires*: it decides no new
//!   order and goes back once its reserved units are committed.
//! - **Trouble.** After a database write failed, this instance takes no shard for a lease: an
//!   owner that cannot write would only keep the stock from the others.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use redis::aio::ConnectionManager;
use tokio::sync::mpsc;

use super::owner::{SaleOwner, Surrendered};
use crate::{
    domain::{Sale, ShardId, Sku},
    selling::InventoryError,
    selling::{Hints, ShardLocks},
    store::{Db, StoreError},
};

/// How long a shard found held by another instance is not probed again.
const HELD_ELSEWHERE: Duration = Duration::from_millis(100);
/// While another instance asks for stock, an owner hands a shard over after holding it this long,
/// even within its fair share (turns).
const HOLD_SLICE: Duration = Duration::from_millis(300);
/// How long an acquisition that found no free shard is not repeated.
const NOTHING_FREE: Duration = Duration::from_millis(20);

/// How often hints that say a sale is sold out are checked against PostgreSQL.
const EMPTY_HINTS_RECHECK: Duration = Duration::from_secs(1);
/// How long a request for stock stays visible to the other instances.
const DEMAND_TTL: Duration = Duration::from_millis(1000);
/// Heartbeats expire after this long without renewal.
const HEARTBEAT_TTL: Duration = Duration::from_secs(3);

/// Heartbeat of one instance in a sorted set scored by expiry on Redis' own clock; returns the
/// number of live instances. KEYS: the set. ARGV: instance id, ttl ms.
const HEARTBEAT: &str = r"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
";

/// Outcome of an attempt to take a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// A shard was added to memory (by this call or a concurrent one): decide again.
    Shard,
    /// No free shard with stock could be taken now.
    Nothing,
}

/// Settings of placement.
#[derive(Debug, Clone)]
pub(crate) struct PlacementSettings {
    /// This instance's id in heartbeats and requests for stock.
    pub(crate) instance: String,
    /// Bound of a claim (below the lease).
    pub(crate) write_bound: Duration,
    /// A shard unused this long is handed back.
    pub(crate) idle_release: Duration,
    /// How often idle shards and other instances' requests for stock are looked at.
    pub(crate) interval: Duration,
    /// A sale's owner with no shard, nothing pending and no request for this long is freed
    /// (its batcher stops): longer than any request takes, so none is still using it.
    pub(crate) owner_idle: Duration,
    /// The lease of a shard lock: how long to keep away from shards after database trouble.
    pub(crate) lease: Duration,
}

/// Hands surrendered shards to the releaser task, and records database trouble.
#[derive(Clone)]
pub(crate) struct Surrenders {
    /// Shards to release, with the generation of the sale they were owned for (their hints are
    /// written for that generation only).
    tx: mpsc::UnboundedSender<(Sale, Vec<Surrendered>)>,
    trouble_until: Arc<Mutex<Option<Instant>>>,
    lease: Duration,
}

impl Surrenders {
    /// Queues the release of `shards` of `owner`'s sale.
    pub(crate) fn send(&self, owner: &SaleOwner, shards: Vec<Surrendered>) {
        if !shards.is_empty() {
            let _ = self.tx.send((owner.sale.clone(), shards));
        }
    }

    /// A database write failed: take no shard for a lease.
    pub(crate) fn database_trouble(&self) {
        *self.trouble_until.lock().unwrap() = Some(Instant::now() + self.lease);
    }

    fn in_trouble(&self) -> bool {
        self.trouble_until.lock().unwrap().is_some_and(|until| Instant::now() < until)
    }
}

/// Placement of one instance.
pub(crate) struct Placement {
    settings: PlacementSettings,
    db: Db,
    locks: ShardLocks,
    hints: Hints,
    redis: ConnectionManager,
    surrenders: Surrenders,
    live_instances: AtomicUsize,
    /// Shards recently found held by another instance, or handed over to one: not probed until
    /// the instant given.
    held_elsewhere: Mutex<HashMap<(Sku, ShardId), Instant>>,
    /// Sales for which an acquisition recently found nothing free.
    nothing_free: Mutex<HashMap<Sku, Instant>>,
    /// When this instance last asked for stock, per sale.
    asked: Mutex<HashMap<Sku, Instant>>,
    /// When hints that said "sold out" were last checked against PostgreSQL, per sale.
    empty_hints_confirmed: Mutex<HashMap<Sku, Instant>>,
}

impl Placement {
    /// Placement for this instance, and the task that releases surrendered shards.
    pub(crate) fn new(settings: PlacementSettings, db: Db, locks: ShardLocks, hints: Hints, redis: ConnectionManager) -> Arc<Self> {
        let (tx, rx) = mpsc::unbounded_channel();
        let surrenders = Surrenders { tx, trouble_until: Arc::default(), lease: settings.lease };
        tokio::spawn(release_surrendered(rx, hints.clone()));
        Arc::new(Self {
            settings,
            db,
            locks,
            hints,
            redis,
            surrenders,
            live_instances: AtomicUsize::new(1),
            held_elsewhere: Mutex::default(),
            nothing_free: Mutex::default(),
            asked: Mutex::default(),
            empty_hints_confirmed: Mutex::default(),
        })
    }

    /// Where surrendered shards go.
    pub(crate) fn surrenders(&self) -> &Surrenders {
        &self.surrenders
    }

    /// This instance's id.
    pub(crate) fn instance(&self) -> &str {
        &self.settings.instance
    }

    /// Takes one more free shard with stock for `owner`.
    pub(crate) async fn take_shard(&self, owner: &Arc<SaleOwner>) -> Result<Taken, InventoryError> {
        let sale = &owner.sale;
        // One acquisition at a time; a request that waited while another one took a shard
        // decides again instead.
        let seen = owner.adoptions();
        let _flight = owner.acquiring.lock().await;
        if owner.adoptions() != seen {
            return Ok(Taken::Shard);
        }
        if self.surrenders.in_trouble() {
            return Err(InventoryError::Store(StoreError::Unavailable("this instance's database writes failed recently".into())));
        }
        if self.nothing_free.lock().unwrap().get(&sale.sku).is_some_and(|until| Instant::now() < *until) {
            return Ok(Taken::Nothing);
        }
        let mut hints = self.hints.read(&self.db, sale).await?;
        if hints.iter().all(|&h| h <= 0) && self.due_to_confirm_empty(&sale.sku) {
            // The hints say sold out; PostgreSQL decides. A hint wrongly at 0 would otherwise
            // keep its shard from every owner for good.
            hints = self.hints.rebuild(&self.db, sale).await?;
        }
        let now = Instant::now();
        let start = rand::random_range(0..hints.len().max(1));
        let candidates: Vec<ShardId> = (0..hints.len())
            .map(|i| (start + i) % hints.len())
            .filter(|&i| hints[i] > 0)
            .map(|i| ShardId::new(i as u32))
            .filter(|id| !owner.owns(*id))
            .filter(|id| self.held_elsewhere.lock().unwrap().get(&(sale.sku.clone(), *id)).is_none_or(|until| now >= *until))
            .collect();
        for shard in candidates {
            let Some(guard) = self.locks.try_lock_shard(&sale.sku, shard).await? else {
                self.held_elsewhere.lock().unwrap().insert((sale.sku.clone(), shard), now + HELD_ELSEWHERE);
                continue;
            };
            let fence = guard.fence();
            match self.db.claim_shard(sale, shard, fence, &self.settings.instance, self.settings.write_bound).await {
                Ok(Some(remaining)) if remaining > 0 => {
                    if let Err(unwanted) = owner.adopt(shard, guard, remaining) {
                        // The owner closed meanwhile (a reset, or freed): the caller reloads.
                        self.surrenders.send(owner, vec![unwanted]);
                    }
                    return Ok(Taken::Shard);
                }
                Ok(Some(_)) => {
                    // Empty after all (the hint was behind): say so, and let it go.
                    self.surrenders.send(owner, vec![Surrendered { shard, guard, empty: true }]);
                }
                Ok(None) => {
                    // A claim with this fence or a newer one came first: Redis lost its counters
                    // (or the sale was reset). Raise the counter above the store's and move on.
                    // (The claim itself counted the rejection in the sale's row.)
                    metrics::counter!("seckill_fence_rejections_total").increment(1);
                    self.locks.reseed_from_store(&self.db, &sale.sku, shard).await?;
                    self.surrenders.send(owner, vec![Surrendered { shard, guard, empty: false }]);
                }
                Err(e) if e.wrote_nothing() => {
                    // Another transaction held the row past the lock wait, or no connection came
                    // free: nothing was claimed, and the database answers. Not its trouble.
                    self.surrenders.send(owner, vec![Surrendered { shard, guard, empty: false }]);
                    tracing::info!(sku = %sale.sku, %shard, error = %e, "claim wrote nothing; busy");
                    return Err(InventoryError::Busy);
                }
                Err(e) => {
                    self.surrenders.send(owner, vec![Surrendered { shard, guard, empty: false }]);
                    self.surrenders.database_trouble();
                    return Err(StoreError::from(e).into());
                }
            }
        }
        self.nothing_free.lock().unwrap().insert(sale.sku.clone(), Instant::now() + NOTHING_FREE);
        Ok(Taken::Nothing)
    }

    /// Whether hints that say "sold out" are due to be checked against PostgreSQL (at most every
    /// [`EMPTY_HINTS_RECHECK`] per sale).
    fn due_to_confirm_empty(&self, sku: &Sku) -> bool {
        let now = Instant::now();
        let mut confirmed = self.empty_hints_confirmed.lock().unwrap();
        let due = confirmed.get(sku).is_none_or(|at| now >= *at + EMPTY_HINTS_RECHECK);
        if due {
            confirmed.insert(sku.clone(), now);
        }
        due
    }

    /// Drops what no decision needs any more: shards no longer kept away from, and the per-sale
    /// instants older than the windows they are compared with. What is left is bounded by the
    /// sales active now, also when sales are deleted or never ordered again.
    pub(crate) fn prune(&self) {
        let now = Instant::now();
        self.held_elsewhere.lock().unwrap().retain(|_, until| now < *until);
        self.nothing_free.lock().unwrap().retain(|_, until| now < *until);
        self.asked.lock().unwrap().retain(|_, at| now < *at + self.settings.interval);
        self.empty_hints_confirmed.lock().unwrap().retain(|_, at| now < *at + EMPTY_HINTS_RECHECK);
    }

    /// Entries in the per-sale maps (for the gauge that shows they stay bounded).
    pub(crate) fn entries(&self) -> usize {
        self.held_elsewhere.lock().unwrap().len()
            + self.nothing_free.lock().unwrap().len()
            + self.asked.lock().unwrap().len()
            + self.empty_hints_confirmed.lock().unwrap().len()
    }

    /// How long an owner may stay idle before it is freed.
    pub(crate) fn owner_idle(&self) -> Duration {
        self.settings.owner_idle
    }

    /// Tells the other instances that this one needs stock of `sku` (at most every tick).
    pub(crate) async fn ask_for_stock(&self, sku: &Sku) -> Result<(), InventoryError> {
        let now = Instant::now();
        {
            let mut asked = self.asked.lock().unwrap();
            if asked.get(sku).is_some_and(|at| now < *at + self.settings.interval) {
                return Ok(());
            }
            asked.insert(sku.clone(), now);
        }
        let _: () = redis::cmd("SET")
            .arg(demand_key(sku))
            .arg(&self.settings.instance)
            .arg("PX")
            .arg(DEMAND_TTL.as_millis() as u64)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    /// One round of giving back: idle shards, and the surplus over the fair share when another
    /// instance asked for stock.
    pub(crate) async fn rebalance(&self, owners: &[Arc<SaleOwner>]) -> Result<(), InventoryError> {
        let owning: Vec<&Arc<SaleOwner>> = owners.iter().filter(|o| o.owns_any()).collect();
        let mut demands: Vec<Option<String>> = vec![None; owning.len()];
        if !owning.is_empty() {
            let mut pipe = redis::pipe();
            for owner in &owning {
                pipe.get(demand_key(&owner.sale.sku));
            }
            demands = pipe.query_async(&mut self.redis.clone()).await?;
        }
        let idle_before = Instant::now() - self.settings.idle_release;
        for (owner, demand) in owning.into_iter().zip(demands) {
            let mut retire = 0;
            if demand.is_some_and(|who| who != self.settings.instance) {
                let stocked = self.hints.read(&self.db, &owner.sale).await?.iter().filter(|&&h| h > 0).count();
                let live = self.live_instances.load(Ordering::Relaxed).max(1);
                let fair = stocked.div_ceil(live).max(1);
                retire = owner.stocked_shards().saturating_sub(fair);
                // Within its fair share, an owner still takes turns: fewer shards with stock than
                // instances asking for them would otherwise leave the others nothing to sell.
                if retire == 0 && owner.longest_held().is_some_and(|held| held >= HOLD_SLICE) {
                    retire = 1;
                }
            }
            let retired = owner.retire(retire);
            let now = Instant::now();
            for shard in &retired {
                // Handed to another instance: do not take it straight back.
                self.held_elsewhere.lock().unwrap().insert((owner.sale.sku.clone(), *shard), now + HOLD_SLICE);
            }
            let given = owner.surrender(idle_before);
            if !given.is_empty() || !retired.is_empty() {
                tracing::debug!(sku = %owner.sale.sku, released = given.len(), ?retired, "handing shards back");
            }
            self.surrenders.send(owner, given);
        }
        Ok(())
    }

    /// Renews this instance's heartbeat and counts the live instances.
    pub(crate) async fn heartbeat(&self) -> Result<usize, InventoryError> {
        let live: usize = redis::Script::new(HEARTBEAT)
            .key("seckill:instances")
            .arg(&self.settings.instance)
            .arg(HEARTBEAT_TTL.as_millis() as u64)
            .invoke_async(&mut self.redis.clone())
            .await?;
        self.live_instances.store(live, Ordering::Relaxed);
        Ok(live)
    }
}

fn demand_key(sku: &Sku) -> String {
    format!("seckill:{{{sku}}}:demand")
}

/// Releases surrendered shards, marking empty ones in the hints first.
async fn release_surrendered(mut rx: mpsc::UnboundedReceiver<(Sale, Vec<Surrendered>)>, hints: Hints) {
    while let Some((sale, shards)) = rx.recv().await {
        let sku = &sale.sku;
        for Surrendered { shard, guard, empty } in shards {
            if empty && let Err(e) = hints.set(&sale, shard, 0).await {
                tracing::debug!(error = %e, "hint update failed; the next read corrects it");
            }
            if let Err(e) = guard.release().await {
                tracing::warn!(%sku, %shard, error = %e, "shard release failed; it expires with its lease");
            }
        }
    }
}
