//! Inventory: sales, their stock, and the purchase loop that every strategy plugs into.
//!
//! The loop: answer replays from the idempotency key; read the hints; plan the shards
//! ([`planner`]); let the sale's strategy attempt the plan ([`strategies`]); on a short shard
//! correct the hint, on a contended lock probe another shard, on a refused write retry; stop at
//! the request deadline (`busy`). `sold_out` is answered only after PostgreSQL confirms that the
//! total left is below the quantity.

mod error;
pub mod gate;
pub mod hints;
pub mod owned;
pub mod planner;
pub mod shard_locks;
pub mod strategies;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

pub use error::InventoryError;
use gate::{Gate, GateAttempt};
use hints::Hints;
use owned::{OwnedAttempt, OwnedShards};
use planner::Planned;
use shard_locks::ShardLocks;
use strategies::{Attempt, BuyError, Ctx, Strategy};

use crate::{
    domain::{Fencing, GateAck, OrderRequest, Refusal, Sale, SaleSpec, Sku},
    store::{Db, OrderRecord, StoreError},
};

/// A sale as a request sees it: its definition and, when fresh, its stock hints (fetched in the
/// same round trip that validated the cached definition).
#[derive(Debug, Clone)]
pub struct SaleView {
    /// The sale.
    pub sale: Sale,
    hints: Option<Vec<i64>>,
}

/// An order's outcome as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purchase {
    /// The order.
    pub record: OrderRecord,
    /// True when this answers a replayed idempotency key (no new order was made).
    pub replayed: bool,
}

/// What an instance remembers of a sale between requests, for one generation of it.
#[derive(Debug, Clone)]
struct CachedSale {
    sale: Sale,
    /// Units left as PostgreSQL last confirmed when refusing an order. Stock only shrinks within
    /// a generation, so an order for more than this is sold out without asking again: a sold-out
    /// flood costs no database work.
    confirmed_left: Option<i64>,
    /// Smallest quantity this instance already recorded as refused (for the `stranded` audit).
    refused_min: Option<u32>,
    /// When the definition was last checked against Redis (owned sales skip the check for
    /// [`OWNED_SALE_RECHECK`]: their batches are fenced by the generation anyway).
    checked_at: Instant,
}

/// How long an owned sale's cached definition is trusted without asking Redis. A reset within
/// that time cannot slip an order into the new sale (every batch checks the generation); it can
/// only delay noticing the reset by this much.
const OWNED_SALE_RECHECK: Duration = Duration::from_millis(100);

/// A cached sale not checked for this long is dropped when another sale is loaded.
const CACHED_SALE_IDLE: Duration = Duration::from_secs(60);

/// How often a request waiting for owned stock asks PostgreSQL whether the sale is sold out.
const SOLD_OUT_RECHECK: Duration = Duration::from_millis(250);

/// How long a request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBounds {
    /// How long one order may take deciding: waiting for admission, locks and stock included.
    pub deadline: Duration,
    /// How much longer its answer may take: an order decided just before the deadline is
    /// committed (or refused) within this. Past deadline and grace a request is answered `503
    /// unavailable` whatever it waits for, so a dependency that stops answering (a blackholed
    /// connection) holds no request, and no admission permit, for longer.
    pub answer_grace: Duration,
}

impl RequestBounds {
    /// The longest a request may take in all.
    pub fn answer(&self) -> Duration {
        self.deadline + self.answer_grace
    }
}

/// The service's core: owns PostgreSQL, the hints, the shard locks and the owned shards.
pub struct Inventory {
    ctx: Ctx,
    hints: Hints,
    owned: Arc<OwnedShards>,
    gate: Arc<Gate>,
    bounds: RequestBounds,
    /// Sales by SKU as last loaded; valid while the hints carry the same generation (every
    /// create/reset changes it), so a request costs no PostgreSQL round trip to look its sale up.
    sales: Mutex<HashMap<Sku, CachedSale>>,
    /// Bounds purchases in progress: past it, requests wait (up to their deadline) here instead of
    /// piling onto the locks and connection pools, and the excess gets a clean `503 busy`.
    admission: tokio::sync::Semaphore,
}

impl Inventory {
    /// Assembles the inventory; `bounds` bound each purchase, `max_in_flight` how many run at
    /// once.
    pub fn new(
        db: Db,
        hints: Hints,
        locks: ShardLocks,
        owned: Arc<OwnedShards>,
        gate: Arc<Gate>,
        bounds: RequestBounds,
        max_in_flight: usize,
    ) -> Self {
        Self {
            ctx: Ctx { db, locks },
            hints,
            owned,
            gate,
            bounds,
            sales: Mutex::default(),
            admission: tokio::sync::Semaphore::new(max_in_flight),
        }
    }

    /// PostgreSQL.
    pub fn db(&self) -> &Db {
        &self.ctx.db
    }

    /// The shard locks.
    pub fn locks(&self) -> &ShardLocks {
        &self.ctx.locks
    }

    /// The stock hints in Redis.
    pub fn hints(&self) -> &Hints {
        &self.hints
    }

    /// The shards this instance owns (owned strategies).
    pub fn owned(&self) -> &OwnedShards {
        &self.owned
    }

    /// The `redis-gate` sales' gate.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Creates or resets a sale and publishes fresh hints (and, for `redis-gate`, seeds its keys).
    pub async fn put_sale(&self, sku: &Sku, spec: &SaleSpec) -> Result<Sale, InventoryError> {
        let sale = self.ctx.db.put_sale(sku, spec).await?;
        self.hints.rebuild(&self.ctx.db, &sale).await?;
        if spec.strategy.gate_ack().is_some() {
            self.gate.seed(&sale, true).await?;
        } else {
            self.gate.retire(sku).await?;
        }
        tracing::info!(%sku, total = spec.total, shards = spec.shards, strategy = %spec.strategy, "sale created");
        Ok(sale)
    }

    /// The sale, or `unknown_sale`: from the cache if the hints still carry its generation.
    pub async fn sale(&self, sku: &Sku) -> Result<SaleView, InventoryError> {
        // The gate's script checks the generation itself, like an owner's batch.
        let self_checking = |c: &CachedSale| c.sale.spec.strategy.owned_fencing().is_some() || c.sale.spec.strategy.gate_ack().is_some();
        let trusted = |c: &CachedSale| self_checking(c) && c.checked_at.elapsed() < OWNED_SALE_RECHECK;
        if let Some(cached) = self.sales.lock().unwrap().get(sku).filter(|c| trusted(c)) {
            return Ok(SaleView { hints: None, sale: cached.sale.clone() });
        }
        // Only a sale read from Redis or PostgreSQL can wait on them: the bound (a timer) is for
        // that path, not for every order served from the cache.
        self.answered_within(self.bounds.answer(), self.load_sale(sku)).await
    }

    /// `work`, or `503 unavailable` if it has not ended after `bound` (it is dropped: what it
    /// waited for may still happen).
    async fn answered_within<T>(
        &self,
        bound: Duration,
        work: impl Future<Output = Result<T, InventoryError>>,
    ) -> Result<T, InventoryError> {
        tokio::time::timeout(bound, work).await.unwrap_or_else(|_| {
            tracing::warn!(?bound, "a request found no answer within its bound; answering unavailable");
            Err(InventoryError::Store(StoreError::Unavailable(format!("no answer within {bound:?}"))))
        })
    }

    /// The sale as Redis's hints and, when they are not of the cached generation, PostgreSQL
    /// have it.
    async fn load_sale(&self, sku: &Sku) -> Result<SaleView, InventoryError> {
        let fetched = self.hints.fetch(sku).await?;
        let generation = fetched.generation();
        let still = self.remember_checked(sku, generation);
        if let Some(sale) = still {
            return Ok(SaleView { hints: fetched.for_sale(&sale), sale });
        }
        let sale = self.ctx.db.sale(sku).await?.ok_or_else(|| Refusal::UnknownSale(sku.to_string()))?;
        let hints = match fetched.for_sale(&sale) {
            Some(hints) => hints,
            // New sale to this instance, a reset, or Redis lost its data: republish the hints.
            None => self.hints.rebuild(&self.ctx.db, &sale).await?,
        };
        let cached = CachedSale { sale: sale.clone(), confirmed_left: None, refused_min: None, checked_at: Instant::now() };
        let mut sales = self.sales.lock().unwrap();
        // Sales not asked for in a while (deleted, or over) leave the cache as new ones come in.
        sales.retain(|_, c| c.checked_at.elapsed() < CACHED_SALE_IDLE);
        sales.insert(sku.clone(), cached);
        Ok(SaleView { sale, hints: Some(hints) })
    }

    /// The cached sale if Redis still carries its generation, marked as checked now.
    fn remember_checked(&self, sku: &Sku, generation: Option<i64>) -> Option<Sale> {
        let mut sales = self.sales.lock().unwrap();
        let cached = sales.get_mut(sku).filter(|c| Some(c.sale.generation) == generation)?;
        cached.checked_at = Instant::now();
        Some(cached.sale.clone())
    }

    /// Forgets the cached definition of `sku`, so the next request loads it again.
    fn forget_sale(&self, sku: &Sku) {
        self.sales.lock().unwrap().remove(sku);
    }

    /// Applies `update` to this instance's memory of `sale` (if it is still the same generation).
    fn remember<T>(&self, sale: &Sale, update: impl FnOnce(&mut CachedSale) -> T) -> Option<T> {
        let mut sales = self.sales.lock().unwrap();
        sales.get_mut(&sale.sku).filter(|c| c.sale.generation == sale.generation).map(update)
    }

    /// Whether this instance already knows, without asking, that fewer than `quantity` units are left.
    fn known_sold_out(&self, sale: &Sale, quantity: u32) -> bool {
        self.remember(sale, |c| c.confirmed_left).flatten().is_some_and(|left| left < i64::from(quantity))
    }

    /// Whether PostgreSQL has fewer than `quantity` units left; asks it only if this instance
    /// does not already know.
    async fn is_sold_out(&self, sale: &Sale, quantity: u32) -> Result<bool, InventoryError> {
        let wanted = i64::from(quantity);
        if self.remember(sale, |c| c.confirmed_left).flatten().is_some_and(|left| left < wanted) {
            return Ok(true);
        }
        let left = self.ctx.db.total_remaining(&sale.sku).await?;
        self.remember(sale, |c| c.confirmed_left = Some(left));
        Ok(left < wanted)
    }

    /// Answers `sold_out`, recording the refused quantity unless a smaller one already was.
    async fn sold_out(&self, sale: &Sale, quantity: u32) -> InventoryError {
        let record = self.remember(sale, |c| c.refused_min.is_none_or(|min| quantity < min)).unwrap_or(true);
        if record {
            match self.ctx.db.record_sold_out(&sale.sku, quantity).await {
                Ok(()) => {
                    self.remember(sale, |c| c.refused_min = Some(c.refused_min.map_or(quantity, |m| m.min(quantity))));
                }
                Err(e) => return e.into(),
            }
        }
        InventoryError::from(Refusal::SoldOut)
    }

    /// Sells `request` from the sale, or explains why not.
    ///
    /// A replayed idempotency key costs no lookup up front: the commit refuses a second order
    /// with that key (unique index), and every refusal (duplicate key, user limit, sold out)
    /// checks for an earlier order under the key before answering.
    #[tracing::instrument(level = "debug", skip_all, fields(sku = %view.sale.sku, user = %request.user_id, quantity = request.quantity.get()))]
    pub async fn buy(&self, view: &SaleView, request: &OrderRequest) -> Result<Purchase, InventoryError> {
        self.answered_within(self.bounds.answer(), self.buy_before(view, request, Instant::now() + self.bounds.deadline)).await
    }

    async fn buy_before(&self, view: &SaleView, request: &OrderRequest, deadline: Instant) -> Result<Purchase, InventoryError> {
        let sale = &view.sale;
        let _admitted = tokio::time::timeout_at(deadline.into(), self.admission.acquire()).await.map_err(|_| InventoryError::Busy)?;
        if let Some(ack) = sale.spec.strategy.gate_ack() {
            return self.buy_gate(sale.clone(), ack, request, deadline).await;
        }
        let Some(strategy) = strategies::for_kind(sale.spec.strategy) else {
            let fencing = sale.spec.strategy.owned_fencing().unwrap_or(Fencing::Fenced);
            return self.buy_owned(sale.clone(), fencing, request, deadline).await;
        };
        // A per-request strategy writes once, last, in one transaction: when the pool had no
        // connection free in time, nothing of the order was sent, and the answer is `busy`.
        self.buy_per_request(view, strategy, request, deadline).await.map_err(|e| match e {
            InventoryError::Store(e) if e.is_saturated() => {
                tracing::warn!(error = %e, "database saturated");
                InventoryError::Busy
            }
            e => e,
        })
    }

    /// The purchase loop of the per-request strategies: plan from the stock hints, attempt, learn
    /// from a short or contended shard, until sold, refused or past the deadline.
    async fn buy_per_request(
        &self,
        view: &SaleView,
        strategy: &dyn Strategy,
        request: &OrderRequest,
        deadline: Instant,
    ) -> Result<Purchase, InventoryError> {
        let sale = &view.sale;
        let db = &self.ctx.db;
        // Read at most once per request (usually already by `sale()`), then kept up to date with
        // what the attempts learn: a contended probe or a short shard needs no new read.
        let mut hints = view.hints.clone();
        let quantity = request.quantity.get();
        let start = rand::random_range(0..sale.spec.shards as usize);
        let mut contended = Vec::new();
        loop {
            if Instant::now() >= deadline {
                return Err(InventoryError::Busy);
            }
            let current = match &mut hints {
                Some(current) => current,
                None => hints.insert(self.hints.read(db, sale).await?),
            };
            let plan = match planner::plan(current, quantity, &contended, start) {
                Planned::Try(plan) => plan,
                Planned::SoldOut => {
                    if self.is_sold_out(sale, quantity).await? {
                        return self.refuse_sold_out(sale, request).await;
                    }
                    // The hints were low (e.g. an unprotected strategy wrote past them).
                    hints = Some(self.hints.rebuild(db, sale).await?);
                    contended.clear();
                    continue;
                }
            };
            match strategy.attempt(&self.ctx, sale, request, &plan, deadline).await {
                Ok(Attempt::Bought(record)) => {
                    // Off the request's path: a lagging hint only costs a later request a read.
                    let (hints, sale) = (self.hints.clone(), sale.clone());
                    let taken = plan.parts;
                    tokio::spawn(async move {
                        if let Err(e) = hints.take(&sale, &taken).await {
                            tracing::debug!(error = %e, "hint update failed; the next read corrects it");
                        }
                    });
                    return Ok(Purchase { record, replayed: false });
                }
                Ok(Attempt::Short { shard, remaining }) => {
                    current[shard.get() as usize] = remaining;
                    self.hints.set(sale, shard, remaining).await?;
                }
                Ok(Attempt::Contended(shard)) => contended.push(shard),
                // A stale lease or a lost race: back off a little so the new holder finishes.
                Ok(Attempt::Refused) => tokio::time::sleep(Duration::from_millis(rand::random_range(1..10))).await,
                Err(e) => return self.refuse(sale, request, e).await,
            }
        }
    }
}

impl Inventory {
    /// The purchase loop of the owned strategies: decide from owned memory (taking a free shard
    /// if needed); when no stock is within reach, `sold_out` if PostgreSQL confirms it, else ask
    /// the other instances for stock and try again until the deadline.
    async fn buy_owned(
        &self,
        mut sale: Sale,
        fencing: Fencing,
        request: &OrderRequest,
        deadline: Instant,
    ) -> Result<Purchase, InventoryError> {
        let quantity = request.quantity.get();
        // PostgreSQL is asked whether the sale is sold out at most every `SOLD_OUT_RECHECK` per
        // request while it waits for stock: waiting must not turn into polling the database.
        let mut confirmed_at: Option<Instant> = None;
        loop {
            match self.owned.buy(&sale, fencing, request, deadline).await {
                Ok(OwnedAttempt::Bought(record)) => return Ok(Purchase { record, replayed: false }),
                Ok(OwnedAttempt::SaleChanged) => {
                    self.forget_sale(&sale.sku);
                    sale = self.sale(&sale.sku).await?.sale;
                    if sale.spec.strategy.owned_fencing() != Some(fencing) {
                        return Err(InventoryError::Busy);
                    }
                    continue;
                }
                Ok(OwnedAttempt::NoStock) => {
                    let due = confirmed_at.is_none_or(|at| at.elapsed() >= SOLD_OUT_RECHECK);
                    if due {
                        confirmed_at = Some(Instant::now());
                    }
                    if (due || self.known_sold_out(&sale, quantity)) && self.is_sold_out(&sale, quantity).await? {
                        return self.refuse_sold_out(&sale, request).await;
                    }
                    self.owned.ask_for_stock(&sale.sku).await?;
                    let pause = Duration::from_millis(rand::random_range(5..20));
                    if Instant::now() + pause >= deadline {
                        return Err(InventoryError::Busy);
                    }
                    tokio::time::sleep(pause).await;
                }
                Err(e) => return self.refuse(&sale, request, e).await,
            }
        }
    }

    /// The purchase loop of `redis-gate`: Redis decides; a reset or unseeded sale is reloaded or
    /// seeded and decided again.
    async fn buy_gate(&self, mut sale: Sale, ack: GateAck, request: &OrderRequest, deadline: Instant) -> Result<Purchase, InventoryError> {
        loop {
            if Instant::now() >= deadline {
                return Err(InventoryError::Busy);
            }
            match self.gate.buy(&sale, ack, request, deadline).await {
                Ok(GateAttempt::Bought(record)) => return Ok(Purchase { record, replayed: false }),
                Ok(GateAttempt::Replayed(record)) => return Ok(Purchase { record, replayed: true }),
                Ok(GateAttempt::SoldOut) => return Err(self.sold_out(&sale, request.quantity.get()).await),
                Ok(attempt @ (GateAttempt::SaleChanged | GateAttempt::Unseeded)) => {
                    self.forget_sale(&sale.sku);
                    sale = self.sale(&sale.sku).await?.sale;
                    if sale.spec.strategy.gate_ack() != Some(ack) {
                        return Err(InventoryError::Busy);
                    }
                    if matches!(attempt, GateAttempt::Unseeded) {
                        self.gate.seed(&sale, false).await?;
                    }
                }
                Err(e) => return self.refuse(&sale, request, e).await,
            }
        }
    }

    /// Before refusing a request that carries an idempotency key: the order already made under
    /// that key, if any, is the answer instead (`idempotency_key_reused` if it differs).
    async fn earlier_order(&self, sale: &Sale, request: &OrderRequest) -> Result<Option<Purchase>, InventoryError> {
        let Some(key) = &request.idempotency_key else { return Ok(None) };
        match self.ctx.db.order_by_key(&sale.sku, key).await? {
            None => Ok(None),
            Some(prior) if prior.user_id == request.user_id.as_str() && prior.quantity == request.quantity.get() => {
                Ok(Some(Purchase { record: prior, replayed: true }))
            }
            Some(_) => Err(Refusal::IdempotencyKeyReused.into()),
        }
    }

    /// Answers a request the sale cannot complete: the earlier order it replays, if any, else the
    /// refusal (a user limit; a duplicate key without an order is a bug; errors pass through).
    async fn refuse(&self, sale: &Sale, request: &OrderRequest, why: BuyError) -> Result<Purchase, InventoryError> {
        let refusal = match why {
            BuyError::UserLimit => Refusal::UserLimitReached.into(),
            BuyError::DuplicateKey => InventoryError::Bug("duplicate idempotency key without an order".into()),
            BuyError::Api(e) => return Err(e),
        };
        match self.earlier_order(sale, request).await? {
            Some(purchase) => Ok(purchase),
            None => Err(refusal),
        }
    }

    /// Answers `sold_out`, unless the request replays an earlier order.
    async fn refuse_sold_out(&self, sale: &Sale, request: &OrderRequest) -> Result<Purchase, InventoryError> {
        match self.earlier_order(sale, request).await? {
            Some(purchase) => Ok(purchase),
            None => Err(self.sold_out(sale, request.quantity.get()).await),
        }
    }
}
