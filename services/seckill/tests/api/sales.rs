use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{ScratchApp, assert_error, db, db_at, eventually, sale_body, spawn_app, test_settings, unique_sku};

#[tokio::test]
async fn creating_a_sale_splits_stock_evenly_with_the_remainder_spread() {
    let app = spawn_app().await;

    let sku = app.create_sale(sale_body(10_003, 20, "sharded-fenced")).await;
    let (status, sale) = app.get_json(&format!("/v1/sales/{sku}")).await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(sale["total"], 10_003);
    assert_eq!(sale["remaining"], 10_003);
    assert_eq!(sale["sold"], 0);
    assert_eq!(sale["strategy"], "sharded-fenced");
    let shards = sale["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 20);
    assert_eq!(shards[0]["remaining"], 501);
    assert_eq!(shards[19]["remaining"], 500);
}

#[tokio::test]
async fn resetting_a_sale_wipes_its_orders_and_restores_stock() {
    let app = spawn_app().await;
    let sku = app.create_sale(sale_body(10, 2, "sharded-fenced")).await;
    assert_eq!(app.order(&sku, "u1", 2, Some("reset-key")).await.status(), StatusCode::CREATED);

    let reset = app.put_sale(&sku, &sale_body(6, 3, "db-atomic")).await;
    let (_, sale) = app.get_json(&format!("/v1/sales/{sku}")).await;
    let again = app.order(&sku, "u1", 2, Some("reset-key")).await;

    assert_eq!(reset.status(), StatusCode::OK);
    assert_eq!(sale["total"], 6);
    assert_eq!(sale["sold"], 0);
    assert_eq!(sale["strategy"], "db-atomic");
    assert_eq!(sale["shards"].as_array().unwrap().len(), 3);
    assert_eq!(again.status(), StatusCode::CREATED, "the old order and its key are gone");
}

#[tokio::test]
async fn admin_routes_need_the_bearer_token() {
    let app = spawn_app().await;
    let url = format!("{}/v1/sales/{}", app.address, unique_sku("noauth"));
    let body = sale_body(10, 2, "sharded-fenced");

    let missing = app.http.put(&url).json(&body).send().await.unwrap();
    let wrong = app.http.put(&url).bearer_auth("not-the-token").json(&body).send().await.unwrap();

    assert_error(missing, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_error(wrong, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let (status, _) = app.get_json(&url[app.address.len()..]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing was created");
}

#[tokio::test]
async fn invalid_sale_definitions_are_refused() {
    let app = spawn_app().await;
    let sku = unique_sku("bad");
    let cases = [
        json!({"total": -1, "shards": 2, "per_user_limit": 1, "max_per_order": 1}),
        json!({"total": 10, "shards": 0, "per_user_limit": 1, "max_per_order": 1}),
        json!({"total": 10, "shards": 2, "per_user_limit": 1, "max_per_order": 1, "strategy": "redlock-9000"}),
        json!({"total": "ten", "shards": 2, "per_user_limit": 1, "max_per_order": 1}),
        json!({"total": 10, "shards": 2}),
        json!({"total": 10, "shards": 2, "per_user_limit": 1, "max_per_order": 1, "extra": true}),
    ];

    for body in cases {
        assert_error(app.put_sale(&sku, &body).await, StatusCode::BAD_REQUEST, "invalid_request").await;
    }
    assert_error(app.put_sale("bad{sku}", &sale_body(1, 1, "none")).await, StatusCode::BAD_REQUEST, "invalid_request").await;
    let (status, _) = app.get_json(&format!("/v1/sales/{sku}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn unknown_sales_are_404_everywhere() {
    let app = spawn_app().await;
    let sku = unique_sku("missing");

    let (sale, body) = app.get_json(&format!("/v1/sales/{sku}")).await;
    let (audit, _) = app.get_json(&format!("/v1/sales/{sku}/audit")).await;
    let order = app.order(&sku, "u1", 1, None).await;

    assert_eq!(sale, StatusCode::NOT_FOUND);
    assert_eq!(body["error"], "unknown_sale");
    assert_eq!(audit, StatusCode::NOT_FOUND);
    assert_error(order, StatusCode::NOT_FOUND, "unknown_sale").await;
}

/// Deleting a sale (as the bench and operators do) takes its orders, their parts, its per-user
/// counts and its paid count with it: the order rows carry no foreign key, a trigger does it.
#[tokio::test]
async fn a_deleted_sale_takes_its_orders_with_it() {
    let app = spawn_app().await;
    let sku = app.create_sale(sale_body(10, 2, "owned-shards")).await;
    let bought = app.order(&sku, "leaver", 1, Some("gone-1")).await;
    assert_eq!(bought.status(), StatusCode::CREATED);
    let order: serde_json::Value = bought.json().await.unwrap();
    let paid = app
        .http
        .post(format!("{}/v1/orders/{}/pay", app.address, order["order_id"]))
        .header("X-User-Id", "leaver")
        .header("X-Order-Secret", order["secret"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), StatusCode::OK);
    let db = db().await;

    db.execute("DELETE FROM sales WHERE sku = $1", &[&sku]).await.unwrap();

    for table in ["orders", "order_split_parts", "user_purchases", "sale_paid"] {
        let left: i64 = db.query_one(&format!("SELECT count(*) FROM {table} WHERE sku = $1"), &[&sku]).await.unwrap().get(0);
        assert_eq!(left, 0, "{table} rows of the deleted sale");
    }
}

/// `GET /v1/sales/{sku}` is public, so it must not be a way to run the audit's aggregate over
/// every order: it reads the shard rows alone. Shown with the `orders` table locked (in a
/// database of the test's own): the sale is still answered, and nothing queued for that lock.
#[tokio::test]
async fn reading_a_sale_reads_no_order() {
    let scratch = ScratchApp::start("public_view", test_settings()).await;
    let app = &scratch.app;
    let sku = app.create_sale(sale_body(10, 2, "owned-shards")).await;
    let mut locker = db_at(&scratch.url).await;
    let lock = locker.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE").await.unwrap();

    let read = tokio::spawn({
        let (http, url) = (app.http.clone(), format!("{}/v1/sales/{sku}", app.address));
        async move { http.get(url).send().await.unwrap().status() }
    });
    let waits_on_orders = async || {
        let queued: i64 = lock
            .query_one(
                // The expiry sweeper reads the orders table on its own schedule; only the
                // request's wait counts here.
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_stat_activity a ON a.pid = l.pid
                  WHERE c.relname = 'orders' AND NOT l.granted AND a.query NOT LIKE '%seckill_expire_due%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        read.is_finished() || queued > 0
    };
    assert!(eventually(waits_on_orders).await);
    let queued_on_orders = !read.is_finished();
    lock.rollback().await.unwrap();

    assert!(!queued_on_orders, "the public view waited for the orders table");
    assert_eq!(read.await.unwrap(), StatusCode::OK);
    drop(locker);
    scratch.finish().await;
}
