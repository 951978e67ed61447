//! The audit of a sale, computed from PostgreSQL alone (never from Redis or memory).

use serde::Serialize;

use super::Db;
use super::StoreError;
use crate::domain::Sku;

/// What an auditor checks after a sale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Audit {
    /// Units for sale.
    pub total: i64,
    /// Units in orders.
    pub sold: i64,
    /// Units left in shards.
    pub remaining: i64,
    /// `max(0, sold - total)`.
    pub oversold: i64,
    /// Orders beyond the first per idempotency key.
    pub duplicates: i64,
    /// Units left although an order for that many (or fewer) was refused as sold out.
    pub stranded: i64,
    /// Every shard's remaining plus the units sold from it equals its initial stock.
    pub consistent: bool,
    /// Claims and writes refused by fences (stale lock holders stopped).
    pub fence_rejections: i64,
    /// Users who bought more than the per-user limit (should be 0).
    pub users_over_limit: i64,
}

impl Db {
    /// Audits the sale; `None` if it does not exist.
    pub async fn audit(&self, sku: &Sku) -> Result<Option<Audit>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "WITH sold_by_shard AS (
                     SELECT p.shard, SUM(p.quantity)::bigint AS sold FROM order_parts p
                      WHERE p.sku = $1 GROUP BY p.shard),
                 shard_check AS (
                     SELECT bool_and(s.remaining + COALESCE(b.sold, 0) = s.initial) AS ok,
                            SUM(s.remaining)::bigint AS remaining
                       FROM shards s LEFT JOIN sold_by_shard b USING (shard) WHERE s.sku = $1),
                 per_user AS (
                     SELECT user_id, SUM(quantity) AS bought FROM orders WHERE sku = $1 GROUP BY user_id)
                 SELECT sa.total::bigint,
                        (SELECT COALESCE(SUM(quantity), 0)::bigint FROM orders WHERE sku = $1),
                        COALESCE(sc.remaining, 0),
                        (SELECT (COUNT(*) - COUNT(DISTINCT idempotency_key))::bigint FROM orders
                          WHERE sku = $1 AND idempotency_key IS NOT NULL),
                        COALESCE(sc.ok, true),
                        seckill_fence_rejections(sa.sku),
                        sa.min_refused_quantity,
                        (SELECT COUNT(*)::bigint FROM per_user WHERE bought > sa.per_user_limit)
                   FROM sales sa, shard_check sc WHERE sa.sku = $1",
                &[&sku.as_str()],
            )
            .await?;
        Ok(row.map(|r| {
            let (total, sold, remaining): (i64, i64, i64) = (r.get(0), r.get(1), r.get(2));
            let min_refused: Option<i32> = r.get(6);
            Audit {
                total,
                sold,
                remaining,
                oversold: (sold - total).max(0),
                duplicates: r.get(3),
                stranded: match min_refused {
                    Some(q) if remaining >= i64::from(q) => remaining,
                    _ => 0,
                },
                consistent: r.get(4),
                fence_rejections: r.get(5),
                users_over_limit: r.get(7),
            }
        }))
    }
}
