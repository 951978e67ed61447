use std::time::Duration;

use lockkit::LockClient;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{assert_error, db, eventually, sale_body, spawn_app, spawn_app_with, test_settings};

/// A replay answers the order its key made, for the per-request strategies (a lookup after the
/// commit found the key used) and owned-shards (the batch answers with the order that holds it).
#[tokio::test]
async fn an_order_is_created_and_a_replay_returns_it_without_a_second_order() {
    let app = spawn_app().await;
    for strategy in ["sharded-fenced", "owned-shards"] {
        let sku = app.create_sale(sale_body(100, 4, strategy)).await;

        let first = app.order(&sku, "alice", 2, Some("order-1")).await;
        assert_eq!(first.status(), StatusCode::CREATED, "{strategy}");
        let first: Value = first.json().await.unwrap();
        let replay = app.order(&sku, "alice", 2, Some("order-1")).await;
        assert_eq!(replay.status(), StatusCode::OK, "{strategy}");
        let replay: Value = replay.json().await.unwrap();

        assert_eq!(first, replay, "{strategy}");
        for field in ["order_id", "sku", "user_id", "quantity", "shard", "fence"] {
            assert!(!first[field].is_null(), "{field} in {first}");
        }
        assert!(first["fence"].as_i64().unwrap() >= 1, "{strategy} orders carry their fence");
        let audit = app.audit(&sku).await;
        assert_eq!(audit["sold"], 2, "{strategy}");
    }
}

#[tokio::test]
async fn a_key_reused_for_a_different_order_is_refused() {
    let app = spawn_app().await;
    for strategy in ["sharded-fenced", "owned-shards"] {
        let sku = app.create_sale(sale_body(100, 4, strategy)).await;
        assert_eq!(app.order(&sku, "alice", 1, Some("shared-key")).await.status(), StatusCode::CREATED, "{strategy}");

        let other = app.order(&sku, "bob", 1, Some("shared-key")).await;
        let more = app.order(&sku, "alice", 2, Some("shared-key")).await;

        assert_error(other, StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused").await;
        assert_error(more, StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused").await;
        assert_eq!(app.audit(&sku).await["sold"], 1, "{strategy}");
    }
}

#[tokio::test]
async fn the_per_user_limit_holds_across_orders() {
    let app = spawn_app().await;
    let sku = app.create_sale(sale_body(100, 4, "sharded-fenced")).await;
    assert_eq!(app.order(&sku, "carol", 1, None).await.status(), StatusCode::CREATED);

    let over = app.order(&sku, "carol", 2, None).await;
    let fits = app.order(&sku, "carol", 1, None).await;
    let beyond = app.order(&sku, "carol", 1, None).await;

    assert_error(over, StatusCode::CONFLICT, "user_limit_reached").await;
    assert_eq!(fits.status(), StatusCode::CREATED);
    assert_error(beyond, StatusCode::CONFLICT, "user_limit_reached").await;
    assert_eq!(app.audit(&sku).await["sold"], 2);
}

#[tokio::test]
async fn sold_out_only_when_the_total_left_is_below_the_quantity() {
    let app = spawn_app().await;
    // 3 units over 3 shards: one unit each, so a 2-unit order must gather from two shards.
    let sku = app.create_sale(sale_body(3, 3, "sharded-fenced")).await;

    let gathered = app.order(&sku, "u1", 2, None).await;
    let too_many = app.order(&sku, "u2", 2, None).await;
    let last = app.order(&sku, "u2", 1, None).await;
    let after = app.order(&sku, "u3", 1, None).await;

    assert_eq!(gathered.status(), StatusCode::CREATED);
    assert_error(too_many, StatusCode::CONFLICT, "sold_out").await;
    assert_eq!(last.status(), StatusCode::CREATED);
    assert_error(after, StatusCode::CONFLICT, "sold_out").await;
    let audit = app.audit(&sku).await;
    assert_eq!((audit["sold"].as_i64(), audit["stranded"].as_i64(), audit["consistent"].as_bool()), (Some(3), Some(0), Some(true)));
}

#[tokio::test]
async fn bad_input_is_a_4xx_and_changes_nothing() {
    let app = spawn_app().await;
    let sku = app.create_sale(sale_body(100, 4, "sharded-fenced")).await;
    let url = format!("{}/v1/sales/{sku}/orders", app.address);
    let post = |body: String| app.http.post(&url).header("content-type", "application/json").body(body).send();
    let bad_bodies = [
        "{".to_string(),
        "[]".to_string(),
        json!({"user_id": "u", "quantity": 0}).to_string(),
        json!({"user_id": "u", "quantity": 3}).to_string(),
        json!({"user_id": "u", "quantity": -1}).to_string(),
        json!({"user_id": "u", "quantity": "1"}).to_string(),
        json!({"user_id": 7, "quantity": 1}).to_string(),
        json!({"user_id": "", "quantity": 1}).to_string(),
        json!({"user_id": "x".repeat(65), "quantity": 1}).to_string(),
        json!({"user_id": "tab\there", "quantity": 1}).to_string(),
        json!({"quantity": 1}).to_string(),
        json!({"user_id": "u", "quantity": 1, "price": 0}).to_string(),
    ];

    for body in bad_bodies {
        assert_error(post(body).await.unwrap(), StatusCode::BAD_REQUEST, "invalid_request").await;
    }
    let huge = json!({"user_id": "u", "quantity": 1, "pad": "x".repeat(5000)}).to_string();
    assert_error(post(huge).await.unwrap(), StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;
    let not_json = app.http.post(&url).header("content-type", "text/plain").body("user=u").send().await.unwrap();
    assert_error(not_json, StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type").await;
    let bad_key = app.order(&sku, "u", 1, Some(&"k".repeat(200))).await;
    assert_error(bad_key, StatusCode::BAD_REQUEST, "invalid_request").await;

    let audit = app.audit(&sku).await;
    assert_eq!(audit["sold"], 0);
    assert_eq!(audit["remaining"], 100);
    let held = app_locks_held(&sku).await;
    assert!(held.is_empty(), "no shard lock left behind: {held:?}");
}

/// A shard lock held elsewhere past the request deadline makes the request `503 busy`.
#[tokio::test]
async fn waiting_past_the_deadline_is_503_busy_with_retry_after() {
    let mut settings = test_settings();
    settings.request_deadline = Duration::from_millis(300);
    let app = spawn_app_with(settings).await;
    let sku = app.create_sale(sale_body(10, 1, "sharded-fenced")).await;
    let other = LockClient::connect(&redis_url()).await.unwrap();
    let held = other.try_lock(&format!("seckill:{sku}:0")).await.unwrap().unwrap();

    let response = app.order(&sku, "dave", 1, None).await;

    assert_eq!(response.headers().get("Retry-After").map(|v| v.to_str().unwrap()), Some("1"));
    assert_error(response, StatusCode::SERVICE_UNAVAILABLE, "busy").await;
    held.release().await.unwrap();
    assert_eq!(app.order(&sku, "dave", 1, None).await.status(), StatusCode::CREATED);
    assert_eq!(app.audit(&sku).await["sold"], 1);
}

/// No database connection free within the pool's wait: the order was never sent, so the answer
/// is `503 busy` (nothing done, retry), not `unavailable` (done or not, unknown).
#[tokio::test]
async fn a_saturated_database_pool_is_503_busy_and_sells_nothing() {
    let mut settings = test_settings();
    settings.pools.general = 1;
    let app = spawn_app_with(settings).await;
    let sku = app.create_sale(sale_body(10, 1, "db-pessimistic")).await;
    assert_eq!(app.order(&sku, "erin", 1, None).await.status(), StatusCode::CREATED, "warms the sale's caches");
    // Another session holds the shard's row: the first order takes the pool's one connection and
    // waits on that row lock, so the second finds no connection free.
    let mut other = db().await;
    let row_lock = other.transaction().await.unwrap();
    row_lock.execute("SELECT 1 FROM shards WHERE sku = $1 FOR UPDATE", &[&sku]).await.unwrap();
    let holder: i32 = row_lock.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let first = {
        let (http, url) = (app.http.clone(), format!("{}/v1/sales/{sku}/orders", app.address));
        tokio::spawn(async move { http.post(url).json(&json!({"user_id": "frank", "quantity": 1})).send().await.unwrap() })
    };
    let observer = db().await;
    // Blocked by this session, not by another test's.
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))";
    let blocked = eventually(async || observer.query_one(waiting, &[&holder]).await.unwrap().get::<_, i64>(0) > 0);
    assert!(blocked.await, "the first order never waited on the row");

    let second = app.order(&sku, "grace", 1, None).await;

    assert_eq!(second.headers().get("Retry-After").map(|v| v.to_str().unwrap()), Some("1"));
    assert_error(second, StatusCode::SERVICE_UNAVAILABLE, "busy").await;
    row_lock.rollback().await.unwrap();
    assert_eq!(first.await.unwrap().status(), StatusCode::CREATED);
    let audit = app.audit(&sku).await;
    assert_eq!((audit["sold"].as_i64(), audit["consistent"].as_bool()), (Some(2), Some(true)), "{audit}");
    assert_eq!(stored_order_ids(&sku).await.len(), 2, "erin's and frank's orders, none for grace");
}

pub(crate) fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into())
}

/// Shard locks of the sale currently held in Redis.
async fn app_locks_held(sku: &str) -> Vec<String> {
    let client = LockClient::connect(&redis_url()).await.unwrap();
    client.inspect(&format!("seckill:{sku}:*")).await.unwrap().into_iter().filter(|l| l.held).map(|l| l.name).collect()
}

/// Orders of the sale as PostgreSQL has them.
pub(crate) async fn stored_order_ids(sku: &str) -> Vec<i64> {
    let rows = db().await.query("SELECT id FROM orders WHERE sku = $1 ORDER BY id", &[&sku]).await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}
