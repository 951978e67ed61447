//! [`Catalog`]: the sales as this instance knows them. A request looks its sale up here without a
//! PostgreSQL round trip while Redis's hints carry the cached generation (every create or reset
//! changes it), and learns here, once per generation, how much PostgreSQL says is left when it
//! refuses an order.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use super::{Hints, InventoryError, RequestBounds};
use crate::{
    domain::{Refusal, Sale, Sku},
    store::Db,
};

/// How long a self-checking sale's cached definition is trusted without asking Redis. A reset
/// within that time cannot slip an order into the new sale (every owner's batch and the gate's
/// script check the generation); it can only delay noticing the reset by this much.
const SELF_CHECKING_RECHECK: Duration = Duration::from_millis(100);

/// How long a sale that takes units back (one with a payment window) trusts what PostgreSQL last
/// said was left: a cancelled or expired order can raise it.
const RETURNING_SALE_LEFT_TRUST: Duration = Duration::from_millis(500);

/// A cached sale not checked for this long is dropped when another sale is loaded.
const CACHED_SALE_IDLE: Duration = Duration::from_secs(60);

/// A sale as a request sees it: its definition and, when fresh, its stock hints (fetched in the
/// same round trip that validated the cached definition).
#[derive(Debug, Clone)]
pub struct SaleView {
    /// The sale.
    pub sale: Sale,
    hints: Option<Vec<i64>>,
}

impl SaleView {
    /// The stock hints read with the sale, if they were.
    pub fn hints(&self) -> Option<&[i64]> {
        self.hints.as_deref()
    }
}

/// What an instance remembers of a sale between requests, for one generation of it.
#[derive(Debug, Clone)]
struct CachedSale {
    sale: Sale,
    /// Units left as PostgreSQL last confirmed when refusing an order, and when. Without a payment
    /// window stock only shrinks within a generation, so an order for more than this is sold out
    /// without asking again: a sold-out flood costs no database work. With one, returns can raise
    /// it, so it is trusted for [`RETURNING_SALE_LEFT_TRUST`] only.
    confirmed_left: Option<(i64, Instant)>,
    /// Smallest quantity this instance already recorded as refused (for the `stranded` audit).
    refused_min: Option<u32>,
    /// When the definition was last checked against Redis.
    checked_at: Instant,
}

/// The sales as this instance knows them, and PostgreSQL and the hints they come from.
pub struct Catalog {
    db: Db,
    hints: Hints,
    bounds: RequestBounds,
    sales: Mutex<HashMap<Sku, CachedSale>>,
}

impl Catalog {
    /// A catalog that knows no sale yet; loading one may take up to `bounds`.
    pub fn new(db: Db, hints: Hints, bounds: RequestBounds) -> Self {
        Self { db, hints, bounds, sales: Mutex::default() }
    }

    /// PostgreSQL.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The stock hints in Redis.
    pub fn hints(&self) -> &Hints {
        &self.hints
    }

    /// How long a request may take.
    pub fn bounds(&self) -> RequestBounds {
        self.bounds
    }

    /// The sale, or `unknown_sale`: from the cache if the hints still carry its generation.
    pub async fn sale(&self, sku: &Sku) -> Result<SaleView, InventoryError> {
        // An owner's batch and the gate's script check the generation themselves.
        let self_checking = |c: &CachedSale| c.sale.spec.strategy.owned_fencing().is_some() || c.sale.spec.strategy.gate_ack().is_some();
        let trusted = |c: &CachedSale| self_checking(c) && c.checked_at.elapsed() < SELF_CHECKING_RECHECK;
        if let Some(cached) = self.sales.lock().unwrap().get(sku).filter(|c| trusted(c)) {
            return Ok(SaleView { hints: None, sale: cached.sale.clone() });
        }
        // Only a sale read from Redis or PostgreSQL can wait on them: the bound (a timer) is for
        // that path, not for every order served from the cache. Boxed, so that every order's
        // future does not carry that path's Redis and PostgreSQL calls.
        self.bounds.answered_in_time(Box::pin(self.load(sku))).await
    }

    /// The sale as it is now, after a family found it changed under the cached definition.
    pub async fn reload(&self, sku: &Sku) -> Result<Sale, InventoryError> {
        self.sales.lock().unwrap().remove(sku);
        Ok(self.sale(sku).await?.sale)
    }

    /// The sale as Redis's hints and, when they are not of the cached generation, PostgreSQL
    /// have it.
    async fn load(&self, sku: &Sku) -> Result<SaleView, InventoryError> {
        let fetched = self.hints.fetch(sku).await?;
        if let Some(sale) = self.checked_now(sku, fetched.generation()) {
            return Ok(SaleView { hints: fetched.for_sale(&sale), sale });
        }
        let sale = self.db.sale(sku).await?.ok_or_else(|| Refusal::UnknownSale(sku.to_string()))?;
        let hints = match fetched.for_sale(&sale) {
            Some(hints) => hints,
            // New sale to this instance, a reset, or Redis lost its data: republish the hints.
            None => self.hints.rebuild(&self.db, &sale).await?,
        };
        let cached = CachedSale { sale: sale.clone(), confirmed_left: None, refused_min: None, checked_at: Instant::now() };
        let mut sales = self.sales.lock().unwrap();
        // Sales not asked for in a while (deleted, or over) leave the cache as new ones come in.
        sales.retain(|_, c| c.checked_at.elapsed() < CACHED_SALE_IDLE);
        sales.insert(sku.clone(), cached);
        Ok(SaleView { sale, hints: Some(hints) })
    }

    /// The cached sale if Redis still carries its generation, marked as checked now.
    fn checked_now(&self, sku: &Sku, generation: Option<i64>) -> Option<Sale> {
        let mut sales = self.sales.lock().unwrap();
        let cached = sales.get_mut(sku).filter(|c| Some(c.sale.generation) == generation)?;
        cached.checked_at = Instant::now();
        Some(cached.sale.clone())
    }

    /// Applies `update` to this instance's memory of `sale` (if it is still the same generation).
    fn remember<T>(&self, sale: &Sale, update: impl FnOnce(&mut CachedSale) -> T) -> Option<T> {
        let mut sales = self.sales.lock().unwrap();
        sales.get_mut(&sale.sku).filter(|c| c.sale.generation == sale.generation).map(update)
    }

    /// Whether this instance already knows, without asking, that fewer than `quantity` units are left.
    pub fn known_sold_out(&self, sale: &Sale, quantity: u32) -> bool {
        let trusted = |at: Instant| sale.spec.payment_window.is_none() || at.elapsed() < RETURNING_SALE_LEFT_TRUST;
        self.remember(sale, |c| c.confirmed_left).flatten().is_some_and(|(left, at)| left < i64::from(quantity) && trusted(at))
    }

    /// Whether PostgreSQL has fewer than `quantity` units left; asks it only if this instance
    /// does not already know.
    pub async fn is_sold_out(&self, sale: &Sale, quantity: u32) -> Result<bool, InventoryError> {
        if self.known_sold_out(sale, quantity) {
            return Ok(true);
        }
        let left = self.db.total_remaining(&sale.sku).await?;
        self.remember(sale, |c| c.confirmed_left = Some((left, Instant::now())));
        Ok(left < i64::from(quantity))
    }

    /// Answers `sold_out`, recording the refused quantity unless a smaller one already was.
    pub async fn sold_out(&self, sale: &Sale, quantity: u32) -> InventoryError {
        let record = self.remember(sale, |c| c.refused_min.is_none_or(|min| quantity < min)).unwrap_or(true);
        if record {
            match self.db.record_sold_out(&sale.sku, quantity).await {
                Ok(()) => {
                    self.remember(sale, |c| c.refused_min = Some(c.refused_min.map_or(quantity, |m| m.min(quantity))));
                }
                Err(e) => return e.into(),
            }
        }
        InventoryError::from(Refusal::SoldOut)
    }
}
