//! Three service instances, 200 concurrent clients buying 1-2 units of a 1000-unit sale, with
//! idempotent replays, until sold out. Every protecting strategy must sell exactly the stock,
//! with every acknowledged order stored exactly once; `none` must oversell (the control).

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, spawn_app},
    orders::stored_order_ids,
};

const TOTAL: u32 = 1000;
const CLIENTS: usize = 200;
const PER_USER_LIMIT: u32 = 3;

struct Outcome {
    audit: Value,
    acknowledged: BTreeSet<i64>,
    stored: Vec<i64>,
    bought_by_user: HashMap<String, u32>,
    replay_mismatches: usize,
}

/// What one client saw.
#[derive(Default)]
struct ClientLog {
    acknowledged: Vec<Value>,
    replay_mismatches: usize,
}

/// Sends an order until it is answered with anything but `503` (busy or unavailable), retrying
/// the same idempotency key as a well-behaved client does.
async fn answered(http: &reqwest::Client, url: &str, key: &str, body: &Value) -> (StatusCode, Value) {
    loop {
        let response = http.post(url).header("Idempotency-Key", key).json(body).send().await.unwrap();
        if response.status() != StatusCode::SERVICE_UNAVAILABLE {
            let status = response.status();
            let text = response.text().await.unwrap();
            let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} with a non-JSON body {text:?}: {e}"));
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn client(addresses: Arc<Vec<String>>, sku: String, id: usize) -> ClientLog {
    let http = reqwest::Client::new();
    let mut log = ClientLog::default();
    for n in 0.. {
        // Two orders per user, 1 or 2 units each: some users run into the limit of 3.
        let user = format!("c{id}-u{}", n / 2);
        let quantity = 1 + (id + n) % 2;
        let key = format!("c{id}-o{n}");
        let body = json!({"user_id": user, "quantity": quantity});
        let address = &addresses[(id + n) % addresses.len()];
        let url = format!("{address}/v1/sales/{sku}/orders");
        let (status, answer) = answered(&http, &url, &key, &body).await;
        match (status, answer["error"].as_str()) {
            (StatusCode::CREATED | StatusCode::OK, _) => {
                if n % 4 == 0 {
                    // Replay through another instance: same body, no new order.
                    let other = &addresses[(id + n + 1) % addresses.len()];
                    let replayed = answered(&http, &format!("{other}/v1/sales/{sku}/orders"), &key, &body).await;
                    if replayed != (StatusCode::OK, answer.clone()) {
                        log.replay_mismatches += 1;
                    }
                }
                log.acknowledged.push(answer);
            }
            (StatusCode::CONFLICT, Some("sold_out")) => break,
            (StatusCode::CONFLICT, Some("user_limit_reached")) => {}
            other => panic!("unexpected answer {other:?}: {answer}"),
        }
    }
    log
}

async fn sell_out(strategy: &str, shards: u32) -> Outcome {
    let apps: Vec<TestApp> = vec![spawn_app().await, spawn_app().await, spawn_app().await];
    let sku = apps[0]
        .create_sale(json!({"total": TOTAL, "shards": shards, "per_user_limit": PER_USER_LIMIT, "max_per_order": 2, "strategy": strategy}))
        .await;
    let addresses = Arc::new(apps.iter().map(|a| a.address.clone()).collect::<Vec<_>>());

    let clients: Vec<_> = (0..CLIENTS).map(|id| tokio::spawn(client(addresses.clone(), sku.clone(), id))).collect();
    let mut acknowledged = BTreeSet::new();
    let mut bought_by_user: HashMap<String, u32> = HashMap::new();
    let mut replay_mismatches = 0;
    for log in clients {
        let log = log.await.unwrap();
        replay_mismatches += log.replay_mismatches;
        for order in log.acknowledged {
            acknowledged.insert(order["order_id"].as_i64().unwrap());
            *bought_by_user.entry(order["user_id"].as_str().unwrap().to_owned()).or_default() += order["quantity"].as_u64().unwrap() as u32;
        }
    }
    let audit = apps[1].audit(&sku).await;
    let stored = stored_order_ids(&sku).await;
    for app in &apps {
        app.stop().await;
    }
    Outcome { audit, acknowledged, stored, bought_by_user, replay_mismatches }
}

fn assert_sold_exactly_the_stock(outcome: &Outcome) {
    let audit = &outcome.audit;
    assert_eq!(audit["sold"], TOTAL, "{audit}");
    assert_eq!(audit["remaining"], 0, "{audit}");
    assert_eq!(audit["oversold"], 0, "{audit}");
    assert_eq!(audit["duplicates"], 0, "{audit}");
    assert_eq!(audit["stranded"], 0, "{audit}");
    assert_eq!(audit["consistent"], true, "{audit}");
    assert_eq!(audit["users_over_limit"], 0, "{audit}");
    let stored: BTreeSet<i64> = outcome.stored.iter().copied().collect();
    assert_eq!(stored.len(), outcome.stored.len(), "no order stored twice");
    assert_eq!(outcome.acknowledged, stored, "every acknowledged order stored, nothing else");
    assert!(outcome.bought_by_user.values().all(|&units| units <= PER_USER_LIMIT));
    assert_eq!(outcome.replay_mismatches, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sharded_fenced_sells_exactly_the_stock_across_three_instances() {
    assert_sold_exactly_the_stock(&sell_out("sharded-fenced", 20).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sharded_fenced_with_one_shard_sells_exactly_the_stock() {
    assert_sold_exactly_the_stock(&sell_out("sharded-fenced", 1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owned_shards_sells_exactly_the_stock_across_three_instances() {
    assert_sold_exactly_the_stock(&sell_out("owned-shards", 20).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owned_shards_with_one_shard_sells_exactly_the_stock() {
    assert_sold_exactly_the_stock(&sell_out("owned-shards", 1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lock_sells_exactly_the_stock_without_faults() {
    assert_sold_exactly_the_stock(&sell_out("redis-lock", 20).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn db_atomic_sells_exactly_the_stock() {
    assert_sold_exactly_the_stock(&sell_out("db-atomic", 20).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn db_pessimistic_sells_exactly_the_stock() {
    assert_sold_exactly_the_stock(&sell_out("db-pessimistic", 20).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn db_optimistic_sells_exactly_the_stock() {
    assert_sold_exactly_the_stock(&sell_out("db-optimistic", 20).await);
}

/// The control: without protection the same load oversells, so the checks above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_none_oversells_under_the_same_load() {
    let outcome = sell_out("none", 20).await;

    assert!(outcome.audit["oversold"].as_i64().unwrap() > 0, "{}", outcome.audit);
    assert_eq!(outcome.audit["consistent"], false);
}
