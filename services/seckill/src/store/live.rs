//! The live view of a sale: its shards (stock, fence, owner), its fence rejections, and its
//! orders' units by lifecycle state: two queries, the second an aggregate over the sale's orders
//! (through `orders_by_sku`).

use serde::Serialize;

use super::{Db, ShardRow, StoreError};
use crate::domain::Sku;

/// A sale as it stands in PostgreSQL right now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveSale {
    /// The sale.
    pub sku: String,
    /// Units on sale.
    pub total: i64,
    /// Units left over all shards (negative shards included: an unprotected strategy shows its
    /// oversell here).
    pub remaining: i64,
    /// `total - remaining`: what the shards say was sold.
    pub sold: i64,
    /// Units in reserved orders (bought, not paid yet).
    pub reserved: i64,
    /// Units in paid orders.
    pub paid: i64,
    /// Units of cancelled and expired orders, given back to the stock.
    pub returned: i64,
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
        let rows = client
            .query(
                "SELECT sa.total, seckill_fence_rejections(sa.sku), sa.strategy, s.shard, s.remaining, s.fence, s.owner
                   FROM sales sa JOIN shards s ON s.sku = sa.sku
                  WHERE sa.sku = $1 ORDER BY s.shard",
                &[&sku.as_str()],
            )
            .await?;
        let Some(first) = rows.first() else { return Ok(None) };
        let by_state = client
            .query_one(
                "SELECT COALESCE(SUM(quantity) FILTER (WHERE state = 'reserved'), 0)::bigint,
                        COALESCE(SUM(quantity) FILTER (WHERE state = 'paid'), 0)::bigint,
                        COALESCE(SUM(quantity) FILTER (WHERE state IN ('cancelled', 'expired')), 0)::bigint
                   FROM orders WHERE sku = $1",
                &[&sku.as_str()],
            )
            .await?;
        let shards: Vec<ShardRow> = rows.iter().map(|r| ShardRow::from_row(r, 3)).collect();
        let total = i64::from(first.get::<_, i32>(0));
        let remaining = shards.iter().map(|s| s.remaining).sum();
        Ok(Some(LiveSale {
            sku: sku.to_string(),
            total,
            remaining,
            sold: total - remaining,
            reserved: by_state.get(0),
            paid: by_state.get(1),
            returned: by_state.get(2),
            fence_rejections: first.get(1),
            strategy: first.get(2),
            shards,
        }))
    }
}
