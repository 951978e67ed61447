//! Graceful shutdown: requests in flight are answered, their shard locks released, and new
//! connections refused.

use std::{sync::Arc, time::Duration};

use lockkit::LockClient;
use reqwest::StatusCode;

use crate::{
    helpers::{sale_body, spawn_app},
    orders::redis_url,
};

#[tokio::test]
async fn stopping_answers_in_flight_orders_and_leaves_no_lock_behind() {
    let app = Arc::new(spawn_app().await);
    let sku = app.create_sale(sale_body(10, 1, "sharded-fenced")).await;
    let locks = LockClient::connect(&redis_url()).await.unwrap();
    // Hold the only shard, so the order below is in flight (waiting) when shutdown starts.
    let held = locks.try_lock(&format!("seckill:{sku}:0")).await.unwrap().unwrap();
    let in_flight = {
        let (app, sku) = (app.clone(), sku.clone());
        tokio::spawn(async move { app.order(&sku, "late-buyer", 1, None).await.status() })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let stopping = {
        let app = app.clone();
        tokio::spawn(async move { app.stop().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();

    assert_eq!(in_flight.await.unwrap(), StatusCode::CREATED, "the in-flight order completed");
    stopping.await.unwrap();
    let refused = app.http.get(format!("{}/healthz", app.address)).send().await;
    assert!(refused.is_err(), "no new connections after shutdown");
    let still_held: Vec<_> = locks.inspect(&format!("seckill:{sku}:*")).await.unwrap().into_iter().filter(|l| l.held).collect();
    assert!(still_held.is_empty(), "{still_held:?}");
}
