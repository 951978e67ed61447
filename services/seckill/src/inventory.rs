//! [`Inventory`]: admits each order, hands it to the family its sale's strategy belongs to, and
//! answers. It decides nothing itself.
//!
//! | family | who decides an order | where |
//! |---|---|---|
//! | owned shards (the product, and its `owned-unfenced` control) | the shard's owner, from memory | [`owned`](crate::owned) |
//! | per request (the articles' strategies, and the `none` control) | each request, under locks or SQL | [`lab::per_request`](crate::lab::per_request) |
//! | gate (`redis-gate`, the industry's peer) | a Lua script in Redis | [`lab::gate`](crate::lab::gate) |

use std::{sync::Arc, time::Instant};

use tracing::Instrument;

use crate::{
    domain::{Fencing, GateAck, OrderRequest, Sale, SaleSpec, Sku, StrategyKind},
    lab::{
        gate::Gate,
        per_request::{self, Strategy},
    },
    owned::OwnedShards,
    selling::{Catalog, Hints, InventoryError, Purchase, RequestBounds, SaleView, ShardLocks},
    store::Db,
};

/// Who decides a sale's orders.
#[derive(Clone, Copy)]
enum Family {
    /// The shard's owner, from memory; batches fenced or not.
    Owned(Fencing),
    /// Each request, with the sale's strategy.
    PerRequest(&'static dyn Strategy),
    /// Redis's gate script, acknowledged at that point.
    Gate(GateAck),
}

impl Family {
    /// The family of `kind`.
    fn of(kind: StrategyKind) -> Result<Self, InventoryError> {
        if let Some(fencing) = kind.owned_fencing() {
            return Ok(Self::Owned(fencing));
        }
        if let Some(ack) = kind.gate_ack() {
            return Ok(Self::Gate(ack));
        }
        per_request::for_kind(kind).map(Self::PerRequest).ok_or_else(|| InventoryError::Bug(format!("strategy {kind} has no family")))
    }
}

/// The service's core: the catalog of sales, admission, and the families that sell.
pub struct Inventory {
    catalog: Catalog,
    /// What the per-request strategies work with.
    per_request: per_request::Ctx,
    owned: Arc<OwnedShards>,
    gate: Arc<Gate>,
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
            per_request: per_request::Ctx { db: db.clone(), locks },
            catalog: Catalog::new(db, hints, bounds),
            owned,
            gate,
            admission: tokio::sync::Semaphore::new(max_in_flight),
        }
    }

    /// PostgreSQL.
    pub fn db(&self) -> &Db {
        self.catalog.db()
    }

    /// The shard locks.
    pub fn locks(&self) -> &ShardLocks {
        &self.per_request.locks
    }

    /// The stock hints in Redis.
    pub fn hints(&self) -> &Hints {
        self.catalog.hints()
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
        let sale = self.db().put_sale(sku, spec).await?;
        self.hints().rebuild(self.db(), &sale).await?;
        if spec.strategy.gate_ack().is_some() {
            self.gate.seed(&sale, true).await?;
        } else {
            self.gate.retire(sku).await?;
        }
        tracing::info!(%sku, total = spec.total, shards = spec.shards, strategy = %spec.strategy, "sale created");
        Ok(sale)
    }

    /// The sale, or `unknown_sale`.
    pub async fn sale(&self, sku: &Sku) -> Result<SaleView, InventoryError> {
        self.catalog.sale(sku).await
    }

    /// Sells `request` from the sale, or explains why not.
    pub async fn buy(&self, view: &SaleView, request: &OrderRequest) -> Result<Purchase, InventoryError> {
        let bounds = self.catalog.bounds();
        // Instrumented by hand: `#[tracing::instrument]` would keep the order's future twice in
        // this one's state, once before and once inside the span's wrapper.
        let span = tracing::debug_span!("buy", sku = %view.sale.sku, user = %request.user_id, quantity = request.quantity.get());
        bounds.answered_in_time(self.admitted(view, request, Instant::now() + bounds.deadline)).instrument(span).await
    }

    /// Waits for admission until `deadline`, then lets the sale's family sell.
    ///
    /// The lab families' futures are boxed: an `async fn` is as large as its largest branch, and
    /// the per-request strategies hold whole PostgreSQL conversations, so unboxed they would make
    /// every owned order's future that large, copied each time it is moved.
    async fn admitted(&self, view: &SaleView, request: &OrderRequest, deadline: Instant) -> Result<Purchase, InventoryError> {
        let _admitted = tokio::time::timeout_at(deadline.into(), self.admission.acquire()).await.map_err(|_| InventoryError::Busy)?;
        let sale = view.sale.clone();
        match Family::of(sale.spec.strategy)? {
            Family::Owned(fencing) => self.owned.sell(&self.catalog, sale, fencing, request, deadline).await,
            Family::PerRequest(strategy) => {
                Box::pin(per_request::sell(&self.catalog, &self.per_request, view, strategy, request, deadline)).await
            }
            Family::Gate(ack) => Box::pin(self.gate.sell(&self.catalog, sale, ack, request, deadline)).await,
        }
    }
}
