//! The stock hints in Redis: advisory, so a wrong hint must never keep stock from being sold.

use redis::AsyncCommands;
use reqwest::StatusCode;
use seckill::{
    domain::{Sale, SaleSpec, SaleSpecBody, ShardId, Sku},
    selling::Hints,
};

use crate::{
    helpers::{db, generation, sale_body, spawn_app},
    orders::redis_url,
};

async fn redis() -> redis::aio::ConnectionManager {
    redis::Client::open(redis_url()).unwrap().get_connection_manager().await.unwrap()
}

fn hints_key(sku: &str) -> String {
    format!("seckill:{{{sku}}}:hints")
}

/// A hint written for a sale's previous generation (an owner of the old sale marking its shard
/// empty) that lands after a reset rebuilt the hints leaves the new sale's hints alone.
#[tokio::test]
async fn a_hint_write_of_a_previous_generation_is_dropped() {
    let app = spawn_app().await;
    let body = sale_body(10, 2, "owned-shards");
    let sku = app.create_sale(body.clone()).await;
    let spec = SaleSpec::parse(serde_json::from_value::<SaleSpecBody>(body.clone()).unwrap()).unwrap();
    let previous = Sale { sku: Sku::parse(&sku).unwrap(), spec, generation: generation(&db().await, &sku).await };
    assert_eq!(app.put_sale(&sku, &body).await.status(), StatusCode::OK);
    let mut redis = redis().await;
    let rebuilt: Vec<i64> = redis.hmget(hints_key(&sku), &["0", "1"]).await.unwrap();
    let hints = Hints::new(redis.clone());

    hints.set(&previous, ShardId::new(0), 0).await.unwrap();
    hints.take(&previous, []).await.unwrap();

    let after: Vec<i64> = redis.hmget(hints_key(&sku), &["0", "1"]).await.unwrap();
    assert_eq!(rebuilt, [5, 5]);
    assert_eq!(after, rebuilt, "the previous generation's write changed nothing");
    let current = Sale { generation: generation(&db().await, &sku).await, ..previous };
    hints.set(&current, ShardId::new(0), 3).await.unwrap();
    let now: i64 = redis.hget(hints_key(&sku), "0").await.unwrap();
    assert_eq!(now, 3, "the current generation's write lands");
}

/// A hint wrongly at 0 (however it got there) does not strand its shard: when the hints say
/// sold out, an owner asks PostgreSQL, which has the stock, and sells it.
#[tokio::test]
async fn an_owned_shard_whose_hint_wrongly_says_empty_still_sells() {
    let app = spawn_app().await;
    let sku = app.create_sale(sale_body(10, 1, "owned-shards")).await;
    let _: () = redis().await.hset(hints_key(&sku), "0", 0).await.unwrap();

    let response = app.order(&sku, "after-a-stale-hint", 1, None).await;

    assert_eq!(response.status(), StatusCode::CREATED);
}
