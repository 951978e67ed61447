//! The live view of a sale: its shards (stock, fence, owner), its fence rejections, and its units
//! reserved, paid and returned. It reads no order: the view is public, so it must not be a way to
//! run an aggregate over every order (the audit's, which is gated). Paid units come from the
//! per-sale counter that a payment bumps (`sale_paid`, `migrations/0014_paid_counter.sql`),
//! returned ones from `stock_returns`, and reserved ones are what the shards took less those two.

use serde::Serialize;

use super::{Db, ShardRow, StoreError};
use crate::domain::Sku;

/// A sale as it stands in PostgreSQL right now, every figure from one snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveSale {
    /// The sale.
    pub sku: String,
    /// Units on sale.
    pub total: i64,
    /// Units left over all shards (negative shards included: an unprotected strategy shows its
    /// oversell here), returns not yet folded in by an owner excluded.
    pub remaining: i64,
    /// `total - remaining`: what the shards say was taken, so `reserved + paid + pending_returns`.
    pub sold: i64,
    /// Units in orders bought and not paid yet (always 0 for a sale without a payment window,
    /// whose orders are paid when bought).
    pub reserved: i64,
    /// Units in paid orders.
    pub paid: i64,
    /// Units of cancelled and expired orders, given back to the stock (from `stock_returns`).
    pub returned: i64,
    /// Of those, units not yet folded into a shard by its owner (so not in `remaining` yet).
    pub pending_returns: i64,
    /// Claims and writes refused by a fence since the sale was created or reset.
    pub fence_rejections: i64,
    /// Strategy name.
    pub strategy: String,
    /// Every shard, in order.
    pub shards: Vec<ShardRow>,
}

impl Db {
    /// The live view of `sku`; `None` if there is no such sale.
    pub async fn live_sale(&self, sku: &Sku) -> Result<Option<LiveSale>, StoreError> {
        let client = self.client().await?;
        // One statement, so one snapshot: a payment moves units from reserved to paid in the
        // transaction that bumps the counter, and a cancellation from reserved to a pending return.
        let rows = client
            .query(
                "WITH returns AS (
                     SELECT coalesce(sum(quantity), 0)::bigint AS returned,
                            coalesce(sum(quantity) FILTER (WHERE applied_fence IS NULL), 0)::bigint AS pending
                       FROM stock_returns WHERE sku = $1),
                 paid AS (SELECT coalesce(sum(units), 0)::bigint AS paid FROM sale_paid WHERE sku = $1)
                 SELECT sa.total, seckill_fence_rejections(sa.sku), sa.strategy, sa.payment_window IS NOT NULL,
                        r.returned, r.pending, p.paid,
                        s.shard, s.remaining, s.fence, s.owner
                   FROM sales sa CROSS JOIN returns r CROSS JOIN paid p JOIN shards s ON s.sku = sa.sku
                  WHERE sa.sku = $1 ORDER BY s.shard",
                &[&sku.as_str()],
            )
            .await?;
        let Some(first) = rows.first() else { return Ok(None) };
        let shards: Vec<ShardRow> = rows.iter().map(|r| ShardRow::from_row(r, 7)).collect();
        let total = i64::from(first.get::<_, i32>(0));
        let remaining = shards.iter().map(|s| s.remaining).sum();
        let sold = total - remaining;
        let pending_returns: i64 = first.get(5);
        let units = Units::of(sold - pending_returns, first.get(3), first.get(6));
        Ok(Some(LiveSale {
            sku: sku.to_string(),
            total,
            remaining,
            sold,
            reserved: units.reserved,
            paid: units.paid,
            returned: first.get(4),
            pending_returns,
            fence_rejections: first.get(1),
            strategy: first.get(2),
            shards,
        }))
    }
}

/// Units in live orders, split by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Units {
    reserved: i64,
    paid: i64,
}

impl Units {
    /// `live` units in orders (taken by the shards, less pending returns), of which `counted_paid`
    /// were paid by their buyers. A sale without a payment window never reserves: its orders
    /// are paid when bought and no payment counts them.
    fn of(live: i64, has_window: bool, counted_paid: i64) -> Self {
        if has_window { Self { reserved: live - counted_paid, paid: counted_paid } } else { Self { reserved: 0, paid: live } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sale_with_a_window_splits_its_live_units_by_the_paid_count() {
        assert_eq!(Units::of(10, true, 4), Units { reserved: 6, paid: 4 });
    }

    #[test]
    fn a_sale_without_a_window_has_every_live_unit_paid() {
        assert_eq!(Units::of(10, false, 0), Units { reserved: 0, paid: 10 });
    }
}
