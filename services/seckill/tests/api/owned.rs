//! `owned-shards` under hand-offs and faults, on several instances; `owned-unfenced` as the
//! control that shows the fence is what keeps a deposed owner's batch out.

use std::time::Duration;

use chaos::faultproxy::{FaultProxy, Mode};
use reqwest::StatusCode;
use seckill::config::{Failpoint, Secret, Settings};
use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, assert_error, db, eventually, generation, spawn_app_with, test_settings},
    orders::redis_url,
};

/// Short leases, so takeovers happen within the test's patience.
pub(crate) fn owner_settings() -> Settings {
    let mut settings = test_settings();
    settings.locks.lease = Duration::from_millis(1000);
    settings.owner.write_timeout = Duration::from_millis(400);
    settings.owner.idle_release = Duration::from_millis(200);
    settings
}

fn sale(total: u32, shards: u32, strategy: &str) -> Value {
    json!({"total": total, "shards": shards, "per_user_limit": 1000, "max_per_order": 2, "strategy": strategy})
}

/// Orders one unit as `user`, retrying `503` until the deadline; the final status and body.
async fn buy(app: &TestApp, sku: &str, user: &str) -> (StatusCode, Value) {
    for _ in 0..200 {
        let response = app.order(sku, user, 1, None).await;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status != StatusCode::SERVICE_UNAVAILABLE {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("still 503 after 200 tries");
}

/// Buys one unit at a time through `app` until sold out; the number of units bought.
async fn buy_until_sold_out(app: &TestApp, sku: &str, label: &str) -> u32 {
    let mut bought = 0;
    loop {
        let (status, body) = buy(app, sku, &format!("{label}-{bought}")).await;
        match status {
            StatusCode::CREATED => bought += 1,
            StatusCode::CONFLICT if body["error"] == "sold_out" => return bought,
            other => panic!("unexpected {other}: {body}"),
        }
    }
}

async fn owned_fences(app: &TestApp, sku: &str) -> Vec<i64> {
    let (_, body) = app.get_json(&format!("/v1/sales/{sku}/owners")).await;
    body["shards"].as_array().unwrap().iter().map(|s| s["fence"].as_i64().unwrap()).collect()
}

fn assert_exact(audit: &Value, total: u32) {
    assert_eq!(audit["sold"], total, "{audit}");
    assert_eq!(audit["remaining"], 0, "{audit}");
    assert_eq!(audit["oversold"], 0, "{audit}");
    assert_eq!(audit["consistent"], true, "{audit}");
    assert_eq!(audit["stranded"], 0, "{audit}");
}

/// Three instances take shards as their demand arrives; then only one gets requests, and it
/// still sells every unit: the others hand their shards back (idle, or on request).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shards_are_handed_off_to_the_one_instance_that_still_gets_requests() {
    let apps = [spawn_app_with(owner_settings()).await, spawn_app_with(owner_settings()).await, spawn_app_with(owner_settings()).await];
    let sku = apps[0].create_sale(sale(60, 6, "owned-shards")).await;
    for (i, app) in apps.iter().enumerate() {
        assert_eq!(buy(app, &sku, &format!("warm-{i}")).await.0, StatusCode::CREATED);
        assert!(!owned_fences(app, &sku).await.is_empty(), "instance {i} owns a shard");
    }

    let bought = buy_until_sold_out(&apps[0], &sku, "only").await;

    assert_eq!(bought, 57);
    assert_exact(&apps[0].audit(&sku).await, 60);
}

/// One shard, two instances both busy: the owner hands the shard over in turns while the other
/// asks for stock, so both sell (without turns, the second sells nothing until the first has
/// sold out), and the books balance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_shard_is_sold_in_turns_by_two_busy_instances() {
    let apps = [spawn_app_with(owner_settings()).await, spawn_app_with(owner_settings()).await];
    let sku = apps[0].create_sale(sale(400, 1, "owned-shards")).await;

    let (first, second) = tokio::join!(buy_until_sold_out(&apps[0], &sku, "first"), buy_until_sold_out(&apps[1], &sku, "second"));

    assert_eq!(first + second, 400);
    assert!(first > 0 && second > 0, "both instances sold: {first} and {second}");
    assert_exact(&apps[0].audit(&sku).await, 400);
}

/// A sale reset while an instance owns its shard with stock in memory: that memory belongs to
/// the old generation. The owner's next batch is refused (it checks the generation), its order is
/// decided again against the new sale, and the new sale's books balance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_decided_before_a_reset_never_lands_in_the_new_sale() {
    let owner = spawn_app_with(owner_settings()).await;
    let admin = spawn_app_with(owner_settings()).await;
    let sku = owner.create_sale(sale(20, 1, "owned-shards")).await;
    for i in 0..5 {
        assert_eq!(buy(&owner, &sku, &format!("old-{i}")).await.0, StatusCode::CREATED);
    }

    assert_eq!(admin.put_sale(&sku, &sale(20, 1, "owned-shards")).await.status(), StatusCode::OK);
    let (status, _) = buy(&owner, &sku, "new-0").await;

    assert_eq!(status, StatusCode::CREATED);
    let audit = admin.audit(&sku).await;
    assert_eq!(audit["sold"], 1, "only the order placed after the reset: {audit}");
    assert_eq!(audit["remaining"], 19, "{audit}");
    assert_eq!(audit["consistent"], true, "{audit}");
}

/// The generation check itself, at the store: a batch carrying the previous generation changes
/// nothing; the same batch with the current generation commits (the control). A batch under an
/// older fence is refused and logged in `fence_refusals`; every written part keeps the owner's
/// lease deadline as evidence.
#[tokio::test]
async fn the_batch_function_refuses_a_previous_generation() {
    let app = spawn_app_with(owner_settings()).await;
    let sku = app.create_sale(sale(20, 1, "owned-shards")).await;
    let db = db().await;
    db.execute("UPDATE shards SET fence = 7 WHERE sku = $1", &[&sku]).await.unwrap();
    let generation = generation(&db, &sku).await;
    let lease_until = "2030-01-01 00:00:00+00";
    let batch = |generation: i64, fence: i64| {
        format!(
            "SELECT outcome FROM seckill_commit_orders('{sku}', {generation}, 10, true, true, '{{0}}', '{{{fence}}}', '{{20}}', \
             '{{\"{lease_until}\"}}', '{{u}}', '{{1}}', '{{NULL}}', '{{1}}', '{{0}}', '{{1}}')"
        )
    };

    let stale: String = db.query_one(&batch(generation.wrapping_add(1), 7), &[]).await.unwrap().get(0);
    let deposed: String = db.query_one(&batch(generation, 6), &[]).await.unwrap().get(0);
    let current: String = db.query_one(&batch(generation, 7), &[]).await.unwrap().get(0);

    assert_eq!(stale, "stale_sale");
    assert_eq!(deposed, "deposed");
    assert_eq!(current, "ok");
    let audit = app.audit(&sku).await;
    assert_eq!(audit["sold"], 1, "{audit}");
    assert_eq!(audit["remaining"], 19, "{audit}");
    let in_force = |table: &str| format!("SELECT fence, lease_until = '{lease_until}' FROM {table} WHERE sku = $1");
    let refused = db.query_one(&in_force("fence_refusals"), &[&sku]).await.unwrap();
    let part = db.query_one(&in_force("order_parts"), &[&sku]).await.unwrap();
    assert_eq!((refused.get::<_, i64>(0), refused.get::<_, bool>(1)), (6, true));
    assert_eq!((part.get::<_, i64>(0), part.get::<_, bool>(1)), (7, true));
}

/// An owner stopped gracefully mid-sale hands its shards back on the way out; another instance
/// takes them over and sells the rest. Nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gracefully_stopped_owner_hands_its_shards_over() {
    let first = spawn_app_with(owner_settings()).await;
    let second = spawn_app_with(owner_settings()).await;
    let sku = first.create_sale(sale(40, 2, "owned-shards")).await;
    let mut bought = 0;
    for i in 0..15 {
        assert_eq!(buy(&first, &sku, &format!("first-{i}")).await.0, StatusCode::CREATED);
        bought += 1;
    }
    assert!(!owned_fences(&first, &sku).await.is_empty());

    first.stop().await;
    bought += buy_until_sold_out(&second, &sku, "second").await;

    assert_eq!(bought, 40);
    assert_exact(&second.audit(&sku).await, 40);
}

/// The lock key of an owned shard is deleted from outside while its owner (whose long lease
/// means its watchdog will not look for a while) still holds the stock in memory. Another
/// instance takes the shard over and sells. The first owner's next batch is refused by the
/// fence: its client never sees a 201 under the old fence, the order is decided again under a
/// newer one, and the sale stays exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deposed_owners_batch_is_refused_by_the_fence() {
    let mut slow_watchdog = owner_settings();
    slow_watchdog.locks.lease = Duration::from_secs(30);
    // It keeps the idle shard in memory while the usurper sells (under load that takes longer
    // than the usual 200 ms, and an idle hand-back would leave it no stale batch to send).
    slow_watchdog.owner.idle_release = Duration::from_secs(30);
    let stale = spawn_app_with(slow_watchdog).await;
    let usurper = spawn_app_with(owner_settings()).await;
    let sku = stale.create_sale(sale(20, 1, "owned-shards")).await;
    let (_, first) = buy(&stale, &sku, "before").await;
    let old_fence = first["fence"].as_i64().unwrap();
    let mut redis = redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("DEL").arg(format!("{{lockkit:seckill:{sku}:0}}")).query_async(&mut redis).await.unwrap();
    for i in 0..5 {
        let (status, order) = buy(&usurper, &sku, &format!("usurper-{i}")).await;
        assert_eq!(status, StatusCode::CREATED);
        assert!(order["fence"].as_i64().unwrap() > old_fence);
    }

    let (status, order) = buy(&stale, &sku, "after").await;

    assert_eq!(status, StatusCode::CREATED);
    assert!(order["fence"].as_i64().unwrap() > old_fence + 1, "sold under a newer fence, not the deposed one: {order}");
    let audit = stale.audit(&sku).await;
    assert!(audit["fence_rejections"].as_i64().unwrap() >= 1, "the stale batch was refused: {audit}");
    assert_eq!(audit["sold"], 7, "{audit}");
    assert_eq!(audit["consistent"], true, "{audit}");
}

/// With nobody taking over, an owner whose lock key vanished notices the loss (its watchdog)
/// and stops selling from memory: its next order needs a new grant and a new claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_that_lost_its_lease_stops_selling_from_memory() {
    let app = spawn_app_with(owner_settings()).await;
    let sku = app.create_sale(sale(20, 1, "owned-shards")).await;
    let (_, first) = buy(&app, &sku, "before").await;
    let mut redis = redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("DEL").arg(format!("{{lockkit:seckill:{sku}:0}}")).query_async(&mut redis).await.unwrap();

    assert!(eventually(async || owned_fences(&app, &sku).await.is_empty()).await, "the loss was noticed");
    let (status, second) = buy(&app, &sku, "after").await;

    assert_eq!(status, StatusCode::CREATED);
    assert!(second["fence"].as_i64().unwrap() > first["fence"].as_i64().unwrap());
    assert_exact_so_far(&app.audit(&sku).await, 2);
}

/// Orders one unit as `user` on a task of its own; its response.
fn order_in_background(app: &TestApp, sku: &str, user: &str) -> tokio::task::JoinHandle<reqwest::Response> {
    let (http, url) = (app.http.clone(), format!("{}/v1/sales/{sku}/orders", app.address));
    let body = json!({"user_id": user, "quantity": 1});
    tokio::spawn(async move { http.post(url).json(&body).send().await.unwrap() })
}

/// The stock PostgreSQL holds for shard 0 of `sku`.
async fn remaining_of_shard_0(sku: &str) -> i32 {
    db().await.query_one("SELECT remaining FROM shards WHERE sku = $1 AND shard = 0", &[&sku]).await.unwrap().get(0)
}

/// A batch's answer that arrives after its shard was lost and claimed again belongs to the
/// earlier claim: it must not subtract its units from the new claim's memory, which read the
/// stock after that batch. (Before memory was keyed by claim, it did: the next batch wrote the
/// stock one unit too low, and the audit found a stranded unit.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_batch_answer_leaves_a_newer_claim_of_its_shard_alone() {
    let mut settings = owner_settings();
    settings.failpoint = Some(Failpoint::HoldBatchAnswers);
    let app = spawn_app_with(settings).await;
    let sku = app.create_sale(sale(10, 1, "owned-shards")).await;
    // The first order's batch commits under the first claim; its answer is held.
    let first = order_in_background(&app, &sku, "first");
    let sku_ = sku.clone();
    assert!(eventually(async || remaining_of_shard_0(&sku_).await == 9).await, "the first batch committed");
    let first_fence = owned_fences(&app, &sku).await;
    assert_eq!(first_fence.len(), 1);
    // The lease is lost while the answer is on its way; the next order claims the shard again.
    let mut redis = redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("DEL").arg(format!("{{lockkit:seckill:{sku}:0}}")).query_async(&mut redis).await.unwrap();
    assert!(eventually(async || owned_fences(&app, &sku).await.is_empty()).await, "the loss was noticed");
    let second = order_in_background(&app, &sku, "second");
    assert!(eventually(async || owned_fences(&app, &sku).await.first().is_some_and(|f| *f > first_fence[0])).await, "claimed again");

    seckill::lab::failpoint::release_batch_answers();

    assert_eq!(first.await.unwrap().status(), StatusCode::CREATED);
    assert_eq!(second.await.unwrap().status(), StatusCode::CREATED);
    assert_eq!(remaining_of_shard_0(&sku).await, 8, "two units sold of ten");
    let (_, owners) = app.get_json(&format!("/v1/sales/{sku}/owners")).await;
    assert_eq!(owners["shards"][0]["committed"], 8, "memory agrees with the store: {owners}");
    assert_exact_so_far(&app.audit(&sku).await, 2);
}

/// A bug past the commit: the batcher panics once PostgreSQL has committed the batch. The
/// order's request cannot know its fate, so it answers 500 and does not decide it again (which
/// could sell it twice); the owner closes, and the next order is sold from a new claim of the
/// shard, read from PostgreSQL. (Before, a dropped answer counted as "decide again": the order
/// went to the dead batcher and waited out its deadline, 503.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_order_whose_batcher_panicked_after_the_commit_is_a_500_and_is_not_sold_twice() {
    let mut settings = owner_settings();
    settings.failpoint = Some(Failpoint::PanicAfterBatchCommit);
    let app = spawn_app_with(settings).await;
    let sku = app.create_sale(sale(10, 1, "owned-shards")).await;

    let first = app.order(&sku, "first", 1, None).await;
    let (status, _) = buy(&app, &sku, "second").await;

    assert_error(first, StatusCode::INTERNAL_SERVER_ERROR, "internal").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_exact_so_far(&app.audit(&sku).await, 2);
}

/// A claim that loses its shard row to another transaction past the lock wait wrote nothing
/// while the database answers: the order is 503 busy, and the instance is not put into its
/// "database trouble" back-off, so once the row is free the next order is sold at once. (Before,
/// the claim's 55P03 counted as database trouble: 503 unavailable, and every order for a lease
/// after.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_that_lost_its_row_to_another_transaction_is_busy_not_database_trouble() {
    let app = spawn_app_with(owner_settings()).await;
    let sku = app.create_sale(sale(10, 1, "owned-shards")).await;
    let mut holder = db().await;
    let hold = holder.transaction().await.unwrap();
    hold.execute("SELECT 1 FROM shards WHERE sku = $1 AND shard = 0 FOR UPDATE", &[&sku]).await.unwrap();

    let blocked = app.order(&sku, "blocked", 1, None).await;
    hold.rollback().await.unwrap();
    let after = app.order(&sku, "after", 1, None).await;

    assert_error(blocked, StatusCode::SERVICE_UNAVAILABLE, "busy").await;
    assert_eq!(after.status(), StatusCode::CREATED);
}

/// The connections of one instance to PostgreSQL are blackholed (the proxy holds every byte,
/// and no socket option notices), then it gets an order for a sale it has not loaded yet: the
/// read of the sale, on the general pool, never answers. The request is still answered, 503
/// unavailable, once its deadline and grace have passed. (Before, it hung as long as the
/// connection did, holding its admission permit.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_whose_database_stopped_answering_is_answered_within_its_bound() {
    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), pg_addr()).await.unwrap();
    let mut cut = owner_settings();
    cut.database_url = Secret::new(format!("postgres://seckill@{}/{}", proxy.addr(), database_name()));
    let cut = spawn_app_with(cut).await;
    let healthy = spawn_app_with(owner_settings()).await;
    let sku = healthy.create_sale(sale(10, 1, "owned-shards")).await;
    proxy.set_mode(Mode::Blackhole);

    let answered = tokio::time::timeout(Duration::from_secs(60), cut.order(&sku, "cut-off", 1, None)).await;

    proxy.set_mode(Mode::Pass);
    let response = answered.expect("the request hung with its database");
    assert_error(response, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
}

/// What an instance keeps per sale is freed once the sale is over here: after twenty sales sold
/// out on one instance, no sale owner (nor its batcher) is left, and placement keeps nothing
/// about them. The instance's own counts (its gauges are the test process's) show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_an_instance_keeps_per_sale_is_freed_once_the_sale_is_over() {
    let app = spawn_app_with(owner_settings()).await;
    for i in 0..20 {
        let sku = app.create_sale(sale(1, 1, "owned-shards")).await;
        assert_eq!(buy(&app, &sku, &format!("only-{i}")).await.0, StatusCode::CREATED);
        assert_eq!(buy(&app, &sku, &format!("late-{i}")).await.0, StatusCode::CONFLICT);
    }
    assert!(app.owned.sale_owners() > 0, "owners were kept while the sales were on");

    let owners_freed = eventually(async || app.owned.sale_owners() == 0).await;
    let placement_freed = eventually(async || app.owned.placement_entries() == 0).await;

    assert!(owners_freed, "sale owners left: {}", app.owned.sale_owners());
    assert!(placement_freed, "placement entries left: {}", app.owned.placement_entries());
}

fn assert_exact_so_far(audit: &Value, sold: u32) {
    assert_eq!(audit["sold"], sold, "{audit}");
    assert_eq!(audit["oversold"], 0, "{audit}");
    assert_eq!(audit["consistent"], true, "{audit}");
}

/// Kleppmann's delayed packet. The owner's PostgreSQL traffic goes through a fault proxy, which
/// holds it (its batch is already sent) past the owner's write bound, so the owner gives the
/// shard up; another instance takes it over and sells out. Then the held bytes are delivered.
/// Returns the audit once the late batch has been executed.
async fn delayed_packet(strategy: &str) -> Value {
    let pg = pg_addr();
    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), pg).await.unwrap();
    let mut delayed = owner_settings();
    delayed.database_url = Secret::new(format!("postgres://seckill@{}/{}", proxy.addr(), database_name()));
    let owner = spawn_app_with(delayed).await;
    let other = spawn_app_with(owner_settings()).await;
    let sku = other.create_sale(sale(20, 1, strategy)).await;
    assert_eq!(buy(&owner, &sku, "first").await.0, StatusCode::CREATED);

    proxy.set_mode(Mode::Blackhole);
    let held = owner.order(&sku, "held", 1, None).await;
    assert_eq!(held.status(), StatusCode::SERVICE_UNAVAILABLE, "a batch of unknown fate is never acknowledged");
    let taken_over = buy_until_sold_out(&other, &sku, "other").await;
    assert_eq!(taken_over, 19);
    let before = db().await.query_one("SELECT fence_rejections FROM sales WHERE sku = $1", &[&sku]).await.unwrap().get::<_, i64>(0);
    proxy.set_mode(Mode::Pass);

    // The late batch lands: refused by the fence (a rejection is counted), or written (an order
    // appears beyond the stock).
    let landed = eventually(async || {
        let audit = other.audit(&sku).await;
        audit["fence_rejections"].as_i64().unwrap() > before || audit["sold"].as_i64().unwrap() > 20
    })
    .await;
    assert!(landed, "the held batch reached PostgreSQL");
    other.audit(&sku).await
}

/// The test database's name (from `DATABASE_URL`).
fn database_name() -> String {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://seckill@127.0.0.1:5440/seckill".into());
    let config: tokio_postgres::Config = url.parse().unwrap();
    config.get_dbname().unwrap_or("seckill").to_string()
}

fn pg_addr() -> std::net::SocketAddr {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://seckill@127.0.0.1:5440/seckill".into());
    let config: tokio_postgres::Config = url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("tests need PostgreSQL over TCP, not {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}").parse().unwrap_or_else(|_| std::net::SocketAddr::from(([127, 0, 0, 1], port)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delayed_batch_from_a_deposed_owner_is_refused_by_the_fence() {
    let audit = delayed_packet("owned-shards").await;

    assert_exact(&audit, 20);
}

/// The control: the same fault, without the `fence = t` predicate, oversells.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_owned_unfenced_oversells_under_a_delayed_packet() {
    let audit = delayed_packet("owned-unfenced").await;

    assert!(audit["oversold"].as_i64().unwrap() > 0, "{audit}");
    assert_eq!(audit["consistent"], false, "{audit}");
}

/// PostgreSQL is blackholed for one instance only (traffic dropped, no reset): the others take
/// its shards over within about a lease and sell everything. The cut-off instance answers
/// nothing but 201, 409 or 503, and nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_take_over_from_one_whose_database_is_blackholed() {
    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), pg_addr()).await.unwrap();
    let mut cut = owner_settings();
    cut.database_url = Secret::new(format!("postgres://seckill@{}/{}", proxy.addr(), database_name()));
    let cut = spawn_app_with(cut).await;
    let healthy = [spawn_app_with(owner_settings()).await, spawn_app_with(owner_settings()).await];
    let sku = healthy[0].create_sale(sale(60, 3, "owned-shards")).await;
    let mut acknowledged = Vec::new();
    for i in 0..3 {
        let (status, order) = buy(&cut, &sku, &format!("cut-{i}")).await;
        assert_eq!(status, StatusCode::CREATED);
        acknowledged.push(order["order_id"].as_i64().unwrap());
    }

    proxy.set_mode(Mode::Blackhole);
    let cut_answers = async {
        let mut statuses = Vec::new();
        for i in 0..5 {
            statuses.push(cut.order(&sku, &format!("cut-late-{i}"), 1, None).await.status());
        }
        statuses
    };
    let sell = async {
        let mut n = 0;
        for app in healthy.iter().cycle() {
            let (status, body) = buy(app, &sku, &format!("healthy-{n}")).await;
            n += 1;
            match status {
                StatusCode::CREATED => {}
                StatusCode::CONFLICT if body["error"] == "sold_out" => return n - 1,
                other => panic!("unexpected {other}: {body}"),
            }
        }
        unreachable!()
    };
    let (statuses, _) = tokio::join!(cut_answers, sell);

    assert!(statuses.iter().all(|s| *s == StatusCode::SERVICE_UNAVAILABLE || *s == StatusCode::CREATED), "{statuses:?}");
    proxy.set_mode(Mode::Pass);
    let audit = healthy[1].audit(&sku).await;
    assert_eq!(audit["sold"], 60, "{audit}");
    assert_eq!(audit["oversold"], 0, "{audit}");
    assert_eq!(audit["consistent"], true, "{audit}");
    let stored = crate::orders::stored_order_ids(&sku).await;
    assert!(acknowledged.iter().all(|id| stored.contains(id)), "acknowledged orders are stored");
}

/// An owner whose lock server went silent while its database is slow (1 s a request). Its lease
/// is left to run out; with less left than that delay, an order arrives. With the lease margin the owner
/// does not start that batch, so nothing of its lands after its lease; the control
/// (`SECKILL_OWNER__LEASE_MARGIN=false`) writes it anyway, and the write lands after the lease
/// (the fence lets it through: nobody else claimed the shard). Returns such late writes.
async fn writes_after_the_lease(lease_margin: bool) -> i64 {
    let database = FaultProxy::start("127.0.0.1:0".parse().unwrap(), pg_addr()).await.unwrap();
    let locks = FaultProxy::start("127.0.0.1:0".parse().unwrap(), redis_addr()).await.unwrap();
    let mut settings = owner_settings();
    settings.database_url = Secret::new(format!("postgres://seckill@{}/{}", database.addr(), database_name()));
    settings.locks.url = Secret::new(format!("redis://{}", locks.addr()));
    settings.owner.lease_margin = lease_margin;
    settings.owner.idle_release = Duration::from_secs(60);
    // A long lease, so that a stalled test still orders with most of the last second left.
    settings.locks.lease = Duration::from_secs(3);
    settings.owner.write_timeout = Duration::from_millis(1200);
    let app = spawn_app_with(settings).await;
    let sku = app.create_sale(sale(20, 1, "owned-shards")).await;
    assert_eq!(buy(&app, &sku, "first").await.0, StatusCode::CREATED);

    let delay = Duration::from_millis(1000);
    database.set_mode(Mode::DelayRequests(delay));
    locks.set_mode(Mode::Blackhole);
    // Redis' expiry bounds the owner's own deadline (measured from before each renewal was sent).
    let mut redis = redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let key = format!("{{lockkit:seckill:{sku}:0}}");
    let short = eventually(async || {
        let left: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut redis).await.unwrap();
        (0..900).contains(&left)
    });
    assert!(short.await, "the lease runs down without renewals");
    let late = app.order(&sku, "late", 1, None).await.status();
    assert!(late == StatusCode::CREATED || late == StatusCode::SERVICE_UNAVAILABLE, "{late}");

    // Whatever was sent has reached PostgreSQL well before this.
    database.set_mode(Mode::Pass);
    tokio::time::sleep(delay * 4).await;
    let late_writes = "SELECT count(*) FROM order_parts p JOIN orders o ON o.id = p.order_id
                       WHERE p.sku = $1 AND o.written_at > p.lease_until";
    db().await.query_one(late_writes, &[&sku]).await.unwrap().get(0)
}

fn redis_addr() -> std::net::SocketAddr {
    let client = redis::Client::open(redis_url()).unwrap();
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port) => format!("{host}:{port}").parse().unwrap(),
        other => panic!("tests need Redis over plain TCP, not {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_starts_no_write_that_could_outlast_its_lease() {
    assert_eq!(writes_after_the_lease(true).await, 0);
}

/// The control: the same fault without the lease margin writes after the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_without_the_lease_margin_writes_after_the_lease() {
    assert!(writes_after_the_lease(false).await > 0);
}
