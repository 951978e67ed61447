//! The `sales` and `shards` rows: creating or resetting a sale, reading it back.

use std::time::Duration;

use lockkit::Fence;
use serde::Serialize;
use tokio_postgres::Row;

use super::{Db, StoreError, fence_from_sql};
use crate::domain::{Sale, SaleSpec, ShardId, Sku};

/// One shard's row, serialized as the sale's answer shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardRow {
    /// The shard.
    pub shard: ShardId,
    /// Units left, returns of cancelled and expired orders not yet folded in by an owner included.
    pub remaining: i64,
    /// Highest fence accepted.
    pub fence: Fence,
    /// The instance whose claim set that fence (owned strategies), if any since the last reset.
    pub owner: Option<String>,
}

/// A sale's shards as [`ShardRow`]s, pending returns counted as stock.
const SHARD_ROWS: &str = "SELECT s.shard, s.remaining + coalesce(r.pending, 0), s.fence, s.owner
                            FROM shards s
                            LEFT JOIN (SELECT shard, sum(quantity)::integer AS pending FROM stock_returns
                                        WHERE sku = $1 AND applied_fence IS NULL GROUP BY shard) r USING (shard)
                           WHERE s.sku = $1 ORDER BY s.shard";

impl ShardRow {
    /// Reads `shard, remaining, fence, owner` from `row`, starting at column `at`.
    pub(super) fn from_row(row: &Row, at: usize) -> Self {
        Self {
            shard: ShardId::new(row.get::<_, i32>(at) as u32),
            remaining: i64::from(row.get::<_, i32>(at + 1)),
            fence: fence_from_sql(row.get(at + 2)),
            owner: row.get(at + 3),
        }
    }
}

/// A sale as listed: what it is, not how it is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SaleSummary {
    /// The sale.
    pub sku: String,
    /// Units on sale.
    pub total: i64,
    /// Shards.
    pub shards: i64,
    /// Strategy name.
    pub strategy: String,
}

impl Db {
    /// Creates the sale, or resets it: its orders and per-user counts are wiped and the stock
    /// restored. Shard fences are kept, so tokens granted before the reset stay refused.
    pub async fn put_sale(&self, sku: &Sku, spec: &SaleSpec) -> Result<Sale, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let generation: i64 = rand::random::<i64>().abs();
        let stock: Vec<i32> = spec.shard_stock().into_iter().map(|s| s as i32).collect();
        // Serialise concurrent resets of the same sale.
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&sku.as_str()]).await?;
        tx.execute(
            "INSERT INTO sales (sku, total, shard_count, per_user_limit, max_per_order, strategy, generation, payment_window)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8::bigint * interval '1 millisecond')
             ON CONFLICT (sku) DO UPDATE SET total = $2, shard_count = $3, per_user_limit = $4, max_per_order = $5,
                 strategy = $6, generation = $7, payment_window = EXCLUDED.payment_window, fence_rejections = 0,
                 min_refused_quantity = NULL, created_at = now()",
            &[
                &sku.as_str(),
                &(spec.total as i32),
                &(spec.shards as i32),
                &(spec.per_user_limit as i32),
                &(spec.max_per_order as i32),
                &spec.strategy.as_str(),
                &generation,
                &spec.payment_window.map(|w| w.as_millis() as i64),
            ],
        )
        .await?;
        tx.execute("DELETE FROM order_split_parts WHERE sku = $1", &[&sku.as_str()]).await?;
        tx.execute("DELETE FROM orders WHERE sku = $1", &[&sku.as_str()]).await?;
        tx.execute("DELETE FROM user_purchases WHERE sku = $1", &[&sku.as_str()]).await?;
        tx.execute("DELETE FROM stock_returns WHERE sku = $1", &[&sku.as_str()]).await?;
        // After the orders: a payment in flight holds its order's row, so the delete above waited
        // for it and this one sees its count.
        tx.execute("DELETE FROM sale_paid WHERE sku = $1", &[&sku.as_str()]).await?;
        tx.execute("DELETE FROM shard_claims WHERE sku = $1", &[&sku.as_str()]).await?;
        tx.execute("DELETE FROM fence_refusals WHERE sku = $1", &[&sku.as_str()]).await?;
        tx.execute("DELETE FROM shards WHERE sku = $1 AND shard >= $2", &[&sku.as_str(), &(spec.shards as i32)]).await?;
        tx.execute(
            "INSERT INTO shards (sku, shard, initial, remaining)
             SELECT $1, s - 1, stock, stock FROM unnest($2::int[]) WITH ORDINALITY AS x(stock, s)
             ON CONFLICT (sku, shard) DO UPDATE SET initial = EXCLUDED.initial, remaining = EXCLUDED.remaining, owner = NULL",
            &[&sku.as_str(), &stock],
        )
        .await?;
        tx.commit().await?;
        Ok(Sale { sku: sku.clone(), spec: spec.clone(), generation })
    }

    /// The sale, if it exists.
    pub async fn sale(&self, sku: &Sku) -> Result<Option<Sale>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT total, shard_count, per_user_limit, max_per_order, strategy, generation,
                        (extract(epoch FROM payment_window) * 1000)::bigint
                   FROM sales WHERE sku = $1",
                &[&sku.as_str()],
            )
            .await?;
        row.map(|row| sale_from_row(sku, &row)).transpose()
    }

    /// Every shard of the sale, in shard order.
    pub async fn shard_rows(&self, sku: &Sku) -> Result<Vec<ShardRow>, StoreError> {
        let client = self.client().await?;
        let rows = client.query(SHARD_ROWS, &[&sku.as_str()]).await?;
        Ok(rows.iter().map(|r| ShardRow::from_row(r, 0)).collect())
    }

    /// The most recently created sales, newest first (at most `limit`).
    pub async fn list_sales(&self, limit: i64) -> Result<Vec<SaleSummary>, StoreError> {
        let client = self.client().await?;
        let rows =
            client.query("SELECT sku, total, shard_count, strategy FROM sales ORDER BY created_at DESC, sku LIMIT $1", &[&limit]).await?;
        Ok(rows
            .iter()
            .map(|r| SaleSummary {
                sku: r.get(0),
                total: i64::from(r.get::<_, i32>(1)),
                shards: i64::from(r.get::<_, i32>(2)),
                strategy: r.get(3),
            })
            .collect())
    }

    /// Counts a claim or write refused by a fence (a stale lock holder).
    pub async fn record_fence_rejection(&self, sku: &Sku) -> Result<(), StoreError> {
        let client = self.client().await?;
        client.execute("UPDATE sales SET fence_rejections = fence_rejections + 1 WHERE sku = $1", &[&sku.as_str()]).await?;
        Ok(())
    }

    /// Remembers that an order of `quantity` was refused as sold out (for the `stranded` audit).
    pub async fn record_sold_out(&self, sku: &Sku, quantity: u32) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE sales SET min_refused_quantity = LEAST(COALESCE(min_refused_quantity, $2), $2) WHERE sku = $1",
                &[&sku.as_str(), &(quantity as i32)],
            )
            .await?;
        Ok(())
    }
}

fn sale_from_row(sku: &Sku, row: &Row) -> Result<Sale, StoreError> {
    let strategy: String = row.get(4);
    let count = |i: usize| row.get::<_, i32>(i) as u32;
    Ok(Sale {
        sku: sku.clone(),
        spec: SaleSpec {
            total: count(0),
            shards: count(1),
            per_user_limit: count(2),
            max_per_order: count(3),
            strategy: strategy.parse().map_err(|e| StoreError::Unexpected(format!("stored strategy: {e}")))?,
            payment_window: row.get::<_, Option<i64>>(6).map(|ms| Duration::from_millis(ms as u64)),
        },
        generation: row.get(5),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_shard_row_shows_plain_numbers() {
        let row = ShardRow { shard: ShardId::new(1), remaining: 5, fence: Fence::new(9), owner: Some("a".into()) };
        assert_eq!(serde_json::to_value(row).unwrap(), json!({"shard": 1, "remaining": 5, "fence": 9, "owner": "a"}));
    }
}
