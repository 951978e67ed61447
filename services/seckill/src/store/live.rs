//! The live view of a sale: its shards (stock, fence, owner), its fence rejections and the units
//! its cancelled and expired orders gave back. It reads no order: the view is public, so it must
//! not be a way to run an aggregate over every order (the audit's, which is gated).

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
    /// Units of cancelled and expired orders, given back to the stock (from `stock_returns`).
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
        let returned =
            client.query_one("SELECT COALESCE(SUM(quantity), 0)::bigint FROM stock_returns WHERE sku = $1", &[&sku.as_str()]).await?;
        let shards: Vec<ShardRow> = rows.iter().map(|r| ShardRow::from_row(r, 3)).collect();
        let total = i64::from(first.get::<_, i32>(0));
        let remaining = shards.iter().map(|s| s.remaining).sum();
        Ok(Some(LiveSale {
            sku: sku.to_string(),
            total,
            remaining,
            sold: total - remaining,
            returned: returned.get(0),
            fence_rejections: first.get(1),
            strategy: first.get(2),
            shards,
        }))
    }
}
