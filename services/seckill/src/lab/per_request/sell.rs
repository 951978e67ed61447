//! The purchase loop of the per-request strategies: plan from the stock hints, let the strategy
//! attempt the plan, learn from a short or contended shard, until sold, refused or past the
//! deadline. `sold_out` is answered only after PostgreSQL confirms that the total left is below
//! the quantity.

use std::time::{Duration, Instant};

use super::{
    Attempt, Ctx, Strategy,
    planner::{self, Planned},
};
use crate::{
    domain::OrderRequest,
    selling::{Catalog, InventoryError, Purchase, SaleView},
};

/// Sells `request` with `strategy`. It writes once, last, in one transaction: when the pool had no
/// connection free in time, nothing of the order was sent, and the answer is `busy`.
pub async fn sell(
    catalog: &Catalog,
    ctx: &Ctx,
    view: &SaleView,
    strategy: &dyn Strategy,
    request: &OrderRequest,
    deadline: Instant,
) -> Result<Purchase, InventoryError> {
    attempt_until_done(catalog, ctx, view, strategy, request, deadline).await.map_err(|e| match e {
        InventoryError::Store(e) if e.is_saturated() => {
            tracing::warn!(error = %e, "database saturated");
            InventoryError::Busy
        }
        e => e,
    })
}

async fn attempt_until_done(
    catalog: &Catalog,
    ctx: &Ctx,
    view: &SaleView,
    strategy: &dyn Strategy,
    request: &OrderRequest,
    deadline: Instant,
) -> Result<Purchase, InventoryError> {
    let sale = &view.sale;
    let (db, hints) = (catalog.db(), catalog.hints());
    // Read at most once per request (usually already with the sale), then kept up to date with
    // what the attempts learn: a contended probe or a short shard needs no new read.
    let mut known = view.hints().map(<[i64]>::to_vec);
    let quantity = request.quantity.get();
    let start = rand::random_range(0..sale.spec.shards as usize);
    let mut contended = Vec::new();
    loop {
        if Instant::now() >= deadline {
            return Err(InventoryError::Busy);
        }
        let current = match &mut known {
            Some(current) => current,
            None => known.insert(hints.read(db, sale).await?),
        };
        let plan = match planner::plan(current, quantity, &contended, start) {
            Planned::Try(plan) => plan,
            Planned::SoldOut => {
                if catalog.is_sold_out(sale, quantity).await? {
                    return catalog.refuse_sold_out(sale, request).await;
                }
                // The hints were low (e.g. an unprotected strategy wrote past them).
                known = Some(hints.rebuild(db, sale).await?);
                contended.clear();
                continue;
            }
        };
        match strategy.attempt(ctx, sale, request, &plan, deadline).await {
            Ok(Attempt::Bought(record)) => {
                // Off the request's path: a lagging hint only costs a later request a read.
                let (hints, sale) = (hints.clone(), sale.clone());
                tokio::spawn(async move {
                    if let Err(e) = hints.take(&sale, plan.parts.iter().map(|p| (p.shard, p.take))).await {
                        tracing::debug!(error = %e, "hint update failed; the next read corrects it");
                    }
                });
                return Ok(Purchase { record, replayed: false });
            }
            Ok(Attempt::Short { shard, remaining }) => {
                current[shard.get() as usize] = remaining;
                hints.set(sale, shard, remaining).await?;
            }
            Ok(Attempt::Contended(shard)) => contended.push(shard),
            // A stale lease or a lost race: back off a little so the new holder finishes.
            Ok(Attempt::Refused) => tokio::time::sleep(Duration::from_millis(rand::random_range(1..10))).await,
            Err(e) => return catalog.refuse(sale, request, e).await,
        }
    }
}
