//! The audit's cost: what it reads does not depend on what the planner believes of a sale.

use seckill::store::AUDIT;
use serde_json::json;

use crate::helpers::{BULK_ORDERS, ScratchApp, TestApp, buffers_touched, db_at, explain, insert_bulk_orders, test_settings};

/// The audit reads a sale's rows twice (its parts, and its orders for the totals), however many
/// shards it has, even when the statistics still say the sale is empty (a sale's first minutes,
/// before autovacuum analyses its rows). The bound is three scans of the sale's orders, measured
/// on the same rows. Control: the same audit with its reads `NOT MATERIALIZED` (inlined where the
/// planner sees fit), on the same rows and statistics, reads the parts once per use (three), so
/// the same bound fails. (Before migration 0027 the inlined parts' join ran once per shard.)
#[tokio::test]
async fn the_audit_reads_each_part_once_whatever_the_statistics_say() {
    let scratch = ScratchApp::start("audit_reads", test_settings()).await;
    let db = db_at(&scratch.url).await;
    // The statistics know an earlier sale's shards, orders and parts, not this one's: the planner
    // estimates its rows at one each, as for any sale whose rows came after the last ANALYZE.
    let earlier = bulk_sale(&scratch.app, &db).await;
    db.batch_execute("ANALYZE shards; ANALYZE orders; ANALYZE order_split_parts").await.unwrap();
    let sku = bulk_sale(&scratch.app, &db).await;

    let audit = db.query_one(AUDIT, &[&sku]).await.unwrap();
    let (sold, consistent): (i64, bool) = (audit.get(1), audit.get(4));
    let touched = buffers_touched(&explain(&db, AUDIT, &[&sku]).await);
    let inlined = AUDIT.replace("AS MATERIALIZED", "AS NOT MATERIALIZED");
    assert_ne!(inlined, AUDIT, "the audit materializes its reads");
    let control = buffers_touched(&explain(&db, &inlined, &[&sku]).await);
    let scan = buffers_touched(&explain(&db, "SELECT count(*), sum(quantity) FROM orders WHERE sku = $1", &[&sku]).await);
    drop(db);
    scratch.finish().await;
    assert_ne!(earlier, sku);
    assert_eq!((sold, consistent), (i64::from(BULK_ORDERS), true), "the bulk orders are the sale's books");
    assert!(scan >= u64::try_from(BULK_ORDERS).unwrap() / 10, "one scan of {BULK_ORDERS} orders touched only {scan} buffers");
    let bound = 3 * scan;
    assert!(touched < bound, "the audit touched {touched} buffers, one scan of its orders {scan}");
    assert!(
        control >= bound,
        "control: the audit with its reads inlined touched only {control} buffers (one scan {scan}): the bound cannot tell them apart"
    );
}

/// A sale of 20 shards holding [`BULK_ORDERS`] orders of one unit, each with its part on shard 0,
/// and its books exact; its SKU.
async fn bulk_sale(app: &TestApp, db: &tokio_postgres::Client) -> String {
    let sku =
        app.create_sale(json!({"total": 100_000, "shards": 20, "per_user_limit": 2, "max_per_order": 2, "strategy": "owned-shards"})).await;
    insert_bulk_orders(db, &sku, 7, "", "").await;
    db.execute("UPDATE shards SET remaining = initial - $2 WHERE sku = $1 AND shard = 0", &[&sku, &BULK_ORDERS]).await.unwrap();
    sku
}
