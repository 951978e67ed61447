//! The order lifecycle: a buyer pays or cancels a reserved order, and unpaid orders expire.
//!
//! Every transition is one conditional update of the order's row (`WHERE state = 'reserved'`),
//! so a payment and an expiry racing at the deadline end the order exactly one way. Cancelling or
//! expiring records the order's units as pending returns in the same transaction; the shard's
//! owner folds them into its memory and its next fenced batch, or the next claim of the shard
//! does (see `migrations/0013_order_lifecycle.sql` for why no one else may write them). A buyer
//! proves an order is theirs with its user id and the order's secret ([`OrderSecrets`]); a bare
//! order id opens nothing.

mod secret;
mod sweeper;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use self::{secret::OrderSecrets, sweeper::SweepSettings};
use crate::{
    domain::{OrderState, Refusal, Sku, UserId},
    selling::{Hints, InventoryError},
    store::{Db, LifecycleGuards, OrderStatus, Settled, Settlement, StoreError},
};

/// Pays, cancels and expires orders.
pub struct Lifecycle {
    db: Db,
    hints: Hints,
    secrets: OrderSecrets,
    guards: LifecycleGuards,
}

/// A buyer's proof that an order is theirs.
#[derive(Debug, Clone)]
pub struct OrderProof {
    /// The order.
    pub order: i64,
    /// The buyer it was sold to.
    pub user: UserId,
    /// The secret answered with the purchase.
    pub secret: String,
}

impl Lifecycle {
    /// The lifecycle of `db`'s orders, with the secrets' key read from it.
    pub async fn new(db: Db, hints: Hints, guards: LifecycleGuards) -> Result<Arc<Self>, StoreError> {
        let secrets = OrderSecrets::new(db.order_secret_key().await?);
        Ok(Arc::new(Self { db, hints, secrets, guards }))
    }

    /// Starts this instance's expiry sweeper; it stops with `stop`.
    pub fn sweep(self: &Arc<Self>, settings: SweepSettings, stop: CancellationToken) {
        tokio::spawn(sweeper::run(self.clone(), settings, stop));
    }

    /// The secret of `order`, for its buyer.
    pub fn secret(&self, order: i64) -> String {
        self.secrets.secret(order)
    }

    /// The order, if the proof holds.
    pub async fn status(&self, proof: &OrderProof) -> Result<OrderStatus, InventoryError> {
        self.check(proof)?;
        self.db.order_status(proof.order, proof.user.as_str()).await?.ok_or_else(|| Refusal::UnknownOrder.into())
    }

    /// Pays the order (idempotent: a paid order answers paid), or says why not.
    pub async fn pay(&self, proof: &OrderProof) -> Result<OrderStatus, InventoryError> {
        self.settle(proof, Settlement::Pay, OrderState::Paid).await
    }

    /// Cancels the order (idempotent: a cancelled order answers cancelled), or says why not.
    pub async fn cancel(&self, proof: &OrderProof) -> Result<OrderStatus, InventoryError> {
        self.settle(proof, Settlement::Cancel, OrderState::Cancelled).await
    }

    fn check(&self, proof: &OrderProof) -> Result<(), InventoryError> {
        if self.secrets.verify(proof.order, &proof.secret) { Ok(()) } else { Err(Refusal::UnknownOrder.into()) }
    }

    async fn settle(&self, proof: &OrderProof, to: Settlement, wanted: OrderState) -> Result<OrderStatus, InventoryError> {
        self.check(proof)?;
        let Settled { order, changed } =
            self.db.settle(proof.order, proof.user.as_str(), to, self.guards).await?.ok_or(Refusal::UnknownOrder)?;
        if changed {
            metrics::counter!("seckill_orders_settled_total", "state" => order.state.as_str()).increment(1);
            if matches!(order.state, OrderState::Cancelled | OrderState::Expired) {
                self.announce_returns(&order.sku).await;
            }
        }
        if order.state != wanted {
            return Err(Refusal::OrderClosed(order.state).into());
        }
        Ok(order)
    }

    /// Expires up to `limit` orders past their window; answers how many.
    async fn expire_due(&self, limit: u32) -> Result<u32, InventoryError> {
        let expired = self.db.expire_due(limit, self.guards).await?;
        for (sku, count) in &expired {
            metrics::counter!("seckill_orders_settled_total", "state" => "expired").increment(u64::from(*count));
            self.announce_returns(sku.as_str()).await;
        }
        Ok(expired.iter().map(|(_, n)| n).sum())
    }

    /// Republishes the sale's stock hints, returns included, so instances looking for stock see
    /// the units (an empty shard nobody owns is claimed again for them). Advisory: a failure only
    /// delays that.
    async fn announce_returns(&self, sku: &str) {
        let Ok(sku) = Sku::parse(sku) else { return };
        let republished = match self.db.sale(&sku).await {
            Ok(Some(sale)) => self.hints.rebuild(&self.db, &sale).await.map(drop),
            Ok(None) => Ok(()),
            Err(e) => Err(e.into()),
        };
        if let Err(e) = republished {
            tracing::debug!(%sku, error = %e, "hints not republished after a return; the next read corrects them");
        }
    }
}
