//! The audit's cost: what it reads does not depend on what the planner believes of a sale.

use seckill::store::AUDIT;
use serde_json::json;

use crate::helpers::{BULK_ORDERS, ScratchApp, TestApp, buffers_touched, db_at, explain, insert_bulk_orders, test_settings};

/// The audit reads a sale's parts once, however many shards it has, even when the statistics
/// still say the sale is empty (a sale's first minutes, before autovacuum analyses its rows).
/// Control: the same audit with its reads `NOT MATERIALIZED` (inlined where the planner sees fit),
/// on the same rows and statistics, joins the parts once per shard (20 here), so the same bound
/// fails.
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
    let inlined = AUDIT.replace("AS MATERIALIZED", "AS NOT MATERIALIZED");
    assert_ne!(inlined, AUDIT, "the audit materializes its reads");
    let control = buffers_touched(&explain(&db, &inlined, &[&sku]).await);
    drop(db);
    scratch.finish().await;
    assert_ne!(earlier, sku);
    assert_eq!((sold, consistent), (i64::from(BULK_ORDERS), true), "the bulk orders are the sale's books");
    let bound = 8 * u64::try_from(BULK_ORDERS).unwrap();
    assert!(touched < bound, "the audit touched {touched} buffers for {BULK_ORDERS} orders");
    assert!(
        control >= bound,
        "control: the audit with its reads inlined touched only {control} buffers: the bound cannot tell them apart"
    );
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
