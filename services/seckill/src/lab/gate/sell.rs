//! The purchase loop of `redis-gate`: Redis decides; a reset or unseeded sale is reloaded or
//! seeded and decided again.

use std::time::Instant;

use super::{Gate, GateAttempt};
use crate::{
    domain::{GateAck, OrderRequest, Sale},
    selling::{Catalog, InventoryError, Purchase},
};

impl Gate {
    /// Sells `request` through the gate before `deadline`, or explains why not.
    pub async fn sell(
        &self,
        catalog: &Catalog,
        mut sale: Sale,
        ack: GateAck,
        request: &OrderRequest,
        deadline: Instant,
    ) -> Result<Purchase, InventoryError> {
        loop {
            if Instant::now() >= deadline {
                return Err(InventoryError::Busy);
            }
            match self.buy(&sale, ack, request, deadline).await {
                Ok(GateAttempt::Bought(record)) => return Ok(Purchase { record, replayed: false }),
                Ok(GateAttempt::Replayed(record)) => return Ok(Purchase { record, replayed: true }),
                Ok(GateAttempt::SoldOut) => return Err(catalog.sold_out(&sale, request.quantity.get()).await),
                Ok(attempt @ (GateAttempt::SaleChanged | GateAttempt::Unseeded)) => {
                    sale = catalog.reload(&sale.sku).await?;
                    if sale.spec.strategy.gate_ack() != Some(ack) {
                        return Err(InventoryError::Busy);
                    }
                    if matches!(attempt, GateAttempt::Unseeded) {
                        self.seed(&sale, false).await?;
                    }
                }
                Err(e) => return catalog.refuse(&sale, request, e).await,
            }
        }
    }
}
