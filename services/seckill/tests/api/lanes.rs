//! Batch lanes: an owner commits a batch over some shards while another lane's batch over other
//! shards is in flight, and never writes a shard whose batch has not been answered yet. Every
//! batch's answer is held (`hold-batch-answers`), so "in flight" lasts as long as the test wants.

use std::time::Duration;

use reqwest::StatusCode;
use seckill::config::Failpoint;
use serde_json::Value;

use crate::{
    helpers::{db, eventually, spawn_app_with},
    owned::{assert_exact_so_far, order_in_background, owned_fences, owner_settings, sale},
};

/// What became of three orders while the first one's answer was held.
struct Lanes {
    /// Whether the third order, on a shard no batch was writing, was committed meanwhile.
    third_committed_while_held: bool,
    /// The statuses of the three orders once every answer was released.
    statuses: Vec<StatusCode>,
    audit: Value,
}

/// The users of `sku` that PostgreSQL has an order of.
async fn buyers(sku: &str) -> Vec<String> {
    let rows = db().await.query("SELECT user_id FROM orders WHERE sku = $1 ORDER BY user_id", &[&sku]).await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// Whether `user` has an order in PostgreSQL within a second (a batch in a free lane takes a few
/// milliseconds).
async fn committed_soon(sku: &str, user: &str) -> bool {
    for _ in 0..50 {
        if buyers(sku).await.iter().any(|u| u == user) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// One instance with `lanes` lanes sells a sale of two shards of 10 units:
/// - `first` is committed on shard A, and its answer held: A is being written;
/// - `second` is decided on A too (the only shard owned), which asks for one more shard for the
///   free lane (with two lanes);
/// - `third` is decided on that shard B, which no batch is writing.
///
/// Then every answer is released.
async fn three_orders(lanes: usize, disjoint_lanes: bool) -> Lanes {
    let mut settings = owner_settings();
    settings.failpoint = Some(Failpoint::HoldBatchAnswers);
    settings.batch.lanes = lanes;
    settings.batch.disjoint_lanes = disjoint_lanes;
    // Held answers must not run into the orders' deadline.
    settings.request_deadline = Duration::from_secs(20);
    let app = spawn_app_with(settings).await;
    let sku = app.create_sale(sale(20, 2, "owned-shards")).await;
    let first = order_in_background(&app, &sku, "first");
    assert!(eventually(async || buyers(&sku).await == ["first"]).await, "the first batch committed");

    let second = order_in_background(&app, &sku, "second");
    if lanes > 1 {
        assert!(eventually(async || owned_fences(&app, &sku).await.len() == 2).await, "a shard was taken for the free lane");
    }
    let third = order_in_background(&app, &sku, "third");
    let third_committed_while_held = committed_soon(&sku, "third").await;

    seckill::lab::failpoint::release_batch_answers();
    let mut statuses = Vec::new();
    for order in [first, second, third] {
        statuses.push(order.await.unwrap().status());
    }
    Lanes { third_committed_while_held, statuses, audit: app.audit(&sku).await }
}

/// Two lanes: the third order rides the free lane at once, and the second, on the shard the
/// first lane is writing, waits for that answer; the books are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_free_lane_commits_another_shard_while_a_batch_is_in_flight() {
    let lanes = three_orders(2, true).await;

    assert!(lanes.third_committed_while_held, "the free lane committed the third order");
    assert_eq!(lanes.statuses, [StatusCode::CREATED; 3]);
    assert_exact_so_far(&lanes.audit, 3);
    assert_eq!(lanes.audit["remaining"], 17, "{}", lanes.audit);
}

/// Control: with one lane, nothing is committed while the one batch's answer is on its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_one_lane_commits_nothing_while_its_batch_is_in_flight() {
    let lanes = three_orders(1, true).await;

    assert!(!lanes.third_committed_while_held, "one lane wrote a second batch while the first was in flight");
    assert_eq!(lanes.statuses, [StatusCode::CREATED; 3]);
    assert_exact_so_far(&lanes.audit, 3);
}

/// Control: lanes that do not wait for a shard's batch to be answered write its stock from stale
/// memory. The second order's batch writes shard A's stock as it was before the first order's, and
/// the books no longer add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_lanes_writing_the_same_shard_lose_a_batchs_units() {
    let lanes = three_orders(2, false).await;

    assert_eq!(lanes.statuses, [StatusCode::CREATED; 3]);
    assert_eq!(lanes.audit["sold"], 3, "{}", lanes.audit);
    assert_eq!(lanes.audit["consistent"], false, "{}", lanes.audit);
}
