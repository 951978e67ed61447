//! The audit's cost: what it reads does not depend on what the planner believes of a sale.

use seckill::store::AUDIT;
use serde_json::json;

use crate::helpers::{BULK_ORDERS, ScratchApp, TestApp, buffers_touched, db_at, explain, insert_bulk_orders, test_settings};

/// The audit as it was before its reads were `MATERIALIZED`: the control of the test below.
const AUDIT_BEFORE: &str = "WITH live_parts AS (
        SELECT p.shard, p.quantity FROM order_parts p JOIN orders o ON o.id = p.order_id
         WHERE p.sku = $1 AND o.state IN ('reserved', 'paid')),
    sold_by_shard AS (
        SELECT shard, SUM(quantity)::bigint AS sold FROM live_parts GROUP BY shard),
    pending_by_shard AS (
        SELECT shard, SUM(quantity)::bigint AS pending FROM stock_returns
         WHERE sku = $1 AND applied_fence IS NULL GROUP BY shard),
    shard_check AS (
        SELECT bool_and(s.remaining + COALESCE(r.pending, 0) + COALESCE(b.sold, 0) = s.initial) AS ok,
               SUM(s.remaining + COALESCE(r.pending, 0))::bigint AS remaining
          FROM shards s LEFT JOIN sold_by_shard b USING (shard) LEFT JOIN pending_by_shard r USING (shard)
         WHERE s.sku = $1),
    ended_parts AS (
        SELECT p.order_id, p.shard, p.quantity FROM order_parts p JOIN orders o ON o.id = p.order_id
         WHERE p.sku = $1 AND o.state IN ('cancelled', 'expired')),
    -- Exactly once: every part of an ended order has its return, and no other part has one.
    returns_check AS (
        SELECT (SELECT COUNT(*) FROM ended_parts e
                 WHERE NOT EXISTS (SELECT 1 FROM stock_returns r WHERE r.order_id = e.order_id AND r.shard = e.shard))
             + (SELECT COUNT(*) FROM stock_returns r
                 WHERE r.sku = $1 AND NOT EXISTS (SELECT 1 FROM ended_parts e WHERE e.order_id = r.order_id AND e.shard = r.shard))
               AS wrong),
    per_user AS (
        SELECT user_id, SUM(quantity) AS bought FROM orders
         WHERE sku = $1 AND state IN ('reserved', 'paid') GROUP BY user_id)
    SELECT sa.total::bigint,
           (SELECT COALESCE(SUM(quantity), 0)::bigint FROM orders WHERE sku = $1 AND state IN ('reserved', 'paid')),
           COALESCE(sc.remaining, 0),
           (SELECT (COUNT(*) - COUNT(DISTINCT idempotency_key))::bigint FROM orders
             WHERE sku = $1 AND idempotency_key IS NOT NULL),
           COALESCE(sc.ok, true) AND rc.wrong = 0,
           seckill_fence_rejections(sa.sku),
           sa.min_refused_quantity,
           (SELECT COUNT(*)::bigint FROM per_user WHERE bought > sa.per_user_limit),
           (SELECT COALESCE(SUM(quantity), 0)::bigint FROM orders WHERE sku = $1 AND state = 'reserved'),
           (SELECT COALESCE(SUM(quantity), 0)::bigint FROM orders WHERE sku = $1 AND state IN ('cancelled', 'expired')),
           (SELECT COALESCE(SUM(pending), 0)::bigint FROM pending_by_shard)
      FROM sales sa, shard_check sc, returns_check rc WHERE sa.sku = $1";

/// The audit reads a sale's parts once, however many shards it has, even when the statistics
/// still say the sale is empty (a sale's first minutes, before autovacuum analyses its rows).
/// Control: the audit as it was, on the same rows and statistics, joins the parts once per shard
/// (20 here), so the same bound fails.
#[tokio::test]
async fn the_audit_reads_each_part_once_whatever_the_statistics_say() {
    let scratch = ScratchApp::start("audit_reads", test_settings()).await;
    let db = db_at(&scratch.url).await;
    // The statistics know an earlier sale's shards, orders and parts, not this one's: the planner
    // estimates its rows at one each, as for any sale whose rows came after the last ANALYZE.
    let earlier = bulk_sale(&scratch.app, &db).await;
    db.batch_execute("ANALYZE shards; ANALYZE orders; ANALYZE order_parts").await.unwrap();
    let sku = bulk_sale(&scratch.app, &db).await;

    let audit = db.query_one(AUDIT, &[&sku]).await.unwrap();
    let (sold, consistent): (i64, bool) = (audit.get(1), audit.get(4));
    let touched = buffers_touched(&explain(&db, AUDIT, &[&sku]).await);
    let control = buffers_touched(&explain(&db, AUDIT_BEFORE, &[&sku]).await);
    drop(db);
    scratch.finish().await;
    assert_ne!(earlier, sku);
    assert_eq!((sold, consistent), (i64::from(BULK_ORDERS), true), "the bulk orders are the sale's books");
    let bound = 8 * u64::try_from(BULK_ORDERS).unwrap();
    assert!(touched < bound, "the audit touched {touched} buffers for {BULK_ORDERS} orders");
    assert!(control >= bound, "control: the audit before touched only {control} buffers: the bound cannot tell them apart");
}

/// A sale of 20 shards holding [`BULK_ORDERS`] orders of one unit, each with its part on shard 0,
/// and its books exact; its SKU.
async fn bulk_sale(app: &TestApp, db: &tokio_postgres::Client) -> String {
    let sku =
        app.create_sale(json!({"total": 100_000, "shards": 20, "per_user_limit": 2, "max_per_order": 2, "strategy": "owned-shards"})).await;
    insert_bulk_orders(db, &sku, 7, "", "").await;
    db.execute(
        "INSERT INTO order_parts (order_id, sku, shard, quantity, fence) SELECT id, sku, shard, quantity, fence FROM orders WHERE sku = $1",
        &[&sku],
    )
    .await
    .unwrap();
    db.execute("UPDATE shards SET remaining = initial - $2 WHERE sku = $1 AND shard = 0", &[&sku, &BULK_ORDERS]).await.unwrap();
    sku
}
