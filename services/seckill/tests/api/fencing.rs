//! Fencing in the service: a write from a stale lock holder is refused, and the service re-seeds
//! its fence counters from PostgreSQL by itself after Redis lost them.

use reqwest::StatusCode;

use crate::{
    helpers::{db, sale_body, spawn_app_with, test_settings},
    orders::redis_url,
};

/// Redis loses everything (here `FLUSHDB` of a database only this test uses): fence counters
/// restart at 1, below what PostgreSQL has accepted. The first claim is refused (counted), the
/// counter is re-seeded from the store, and sales continue without anyone stepping in.
#[tokio::test]
async fn after_redis_loses_its_data_fences_are_reseeded_from_the_store() {
    let mut settings = test_settings();
    let url = format!("{}/13", redis_url().trim_end_matches('/'));
    settings.redis_url = seckill::config::Secret::new(url.clone());
    let app = spawn_app_with(settings).await;
    let sku = app.create_sale(sale_body(100, 1, "sharded-fenced")).await;
    for i in 0..5 {
        assert_eq!(app.order(&sku, &format!("before-{i}"), 1, None).await.status(), StatusCode::CREATED);
    }
    let mut redis = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("FLUSHDB").query_async(&mut redis).await.unwrap();

    let after = app.order(&sku, "after-loss", 1, None).await;

    assert_eq!(after.status(), StatusCode::CREATED);
    let order: serde_json::Value = after.json().await.unwrap();
    assert!(order["fence"].as_i64().unwrap() > 5, "the new fence outranks the stored ones: {order}");
    let audit = app.audit(&sku).await;
    assert_eq!(audit["sold"], 6);
    assert!(audit["fence_rejections"].as_i64().unwrap() >= 1, "the stale-looking grant was refused: {audit}");
    assert_eq!(audit["consistent"], true);
}

/// A holder whose fence is older than one the shard has seen cannot write: simulated by raising
/// the stored fence past anything Redis will grant soon.
#[tokio::test]
async fn a_write_with_an_older_fence_than_the_store_has_seen_sells_nothing() {
    let app = spawn_app_with(test_settings()).await;
    let sku = app.create_sale(sale_body(10, 1, "sharded-fenced")).await;
    db().await.execute("UPDATE shards SET fence = 1000000 WHERE sku = $1", &[&sku]).await.unwrap();

    let response = app.order(&sku, "late", 1, None).await;

    // The stale grant is refused, the counter re-seeded, and the retry sells under a newer fence.
    assert_eq!(response.status(), StatusCode::CREATED);
    let order: serde_json::Value = response.json().await.unwrap();
    assert!(order["fence"].as_i64().unwrap() > 1_000_000);
    let audit = app.audit(&sku).await;
    assert_eq!(audit["sold"], 1);
    assert_eq!(audit["fence_rejections"], 1);
}
