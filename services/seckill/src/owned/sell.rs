//! The purchase loop of the owned shards: decide from owned memory (taking a free shard if
//! needed); when no stock is within reach, `sold_out` if PostgreSQL confirms it, else ask the
//! other instances for stock and try again until the deadline.

use std::time::{Duration, Instant};

use super::{OwnedAttempt, OwnedShards};
use crate::{
    domain::{Fencing, OrderRequest, Sale},
    selling::{Catalog, InventoryError, Purchase},
};

// The calls to PostgreSQL below are boxed: they are off the path of an order sold from memory,
// and unboxed every order's future would be as large as the largest of them.

/// How often a request waiting for owned stock asks PostgreSQL whether the sale is sold out:
/// waiting must not turn into polling the database.
const SOLD_OUT_RECHECK: Duration = Duration::from_millis(250);

impl OwnedShards {
    /// Sells `request` from owned shards before `deadline`, or explains why not.
    pub async fn sell(
        &self,
        catalog: &Catalog,
        mut sale: Sale,
        fencing: Fencing,
        request: &OrderRequest,
        deadline: Instant,
    ) -> Result<Purchase, InventoryError> {
        let quantity = request.quantity.get();
        let mut confirmed_at: Option<Instant> = None;
        loop {
            match self.buy(&sale, fencing, request, deadline).await {
                Ok(OwnedAttempt::Bought(record)) => return Ok(Purchase { record, replayed: false }),
                Ok(OwnedAttempt::Earlier(prior)) => return Purchase::replay(request, prior),
                Ok(OwnedAttempt::SaleChanged) => {
                    sale = catalog.reload(&sale.sku).await?;
                    if sale.spec.strategy.owned_fencing() != Some(fencing) {
                        return Err(InventoryError::Busy);
                    }
                }
                Ok(OwnedAttempt::NoStock) => {
                    let due = confirmed_at.is_none_or(|at| at.elapsed() >= SOLD_OUT_RECHECK);
                    if due {
                        confirmed_at = Some(Instant::now());
                    }
                    if (due || catalog.known_sold_out(&sale, quantity)) && Box::pin(catalog.is_sold_out(&sale, quantity)).await? {
                        return Box::pin(catalog.refuse_sold_out(&sale, request)).await;
                    }
                    self.ask_for_stock(&sale.sku).await?;
                    let pause = Duration::from_millis(rand::random_range(5..20));
                    if Instant::now() + pause >= deadline {
                        return Err(InventoryError::Busy);
                    }
                    tokio::time::sleep(pause).await;
                }
                Err(e) => return Box::pin(catalog.refuse(&sale, request, e)).await,
            }
        }
    }
}
