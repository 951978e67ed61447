//! The owners' batch commit: set-based, and free of deadlocks between instances.
//!
//! Two instances that receive the same keys (a client retrying on the other instance) or the same
//! few users at the same moment: no batch fails, and each key yields one order. At the store, two
//! batches that want the same users (or keys) in opposite orders are held at the same row until
//! both wait, then let go: in ascending order both commit, and the control (arrival order,
//! `SECKILL_BATCH__SORTED_LOCKS=false`) deadlocks every time. Then the function's outcome per order
//! on a table of batches, a lone order that waits for no linger, and a buyer just refused for the
//! per-user limit whose next order rides no batch.

use std::{collections::HashMap, time::Duration};

use futures_util::future::join_all;
use rand::seq::SliceRandom;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{
    BULK_ORDERS, EXPLAIN, ScratchApp, TestApp, assert_error, buffers_touched, db, db_at, eventually, explain, generation,
    insert_bulk_orders, spawn_app_with, test_settings,
};

/// Requests per instance and round: enough for both instances' batches to overlap.
const ROUND: usize = 64;

/// Rounds per storm.
const ROUNDS: usize = 8;

/// Stock that outlasts every round.
fn big_sale(per_user_limit: u32) -> Value {
    json!({"total": 100_000, "shards": 20, "per_user_limit": per_user_limit, "max_per_order": 2, "strategy": "owned-shards"})
}

/// Two instances whose batches linger up to 50 ms, so that each round's orders meet in one batch
/// per instance: the worst case, two batches that want the same rows at once.
async fn two_instances() -> [TestApp; 2] {
    let settings = || {
        let mut settings = test_settings();
        settings.batch.linger = Duration::from_millis(50);
        settings
    };
    [spawn_app_with(settings()).await, spawn_app_with(settings()).await]
}

/// Batches that wrote nothing because another transaction held what they needed, over every
/// instance of this test process (the metrics recorder is process-wide).
async fn requeued_batches(app: &TestApp) -> u64 {
    app.metric("seckill_batch_requeued_total").await as u64
}

/// One order request: who, and under which key.
#[derive(Clone)]
struct Request {
    user: String,
    key: String,
}

/// What a storm of rounds came to.
#[derive(Debug, Default)]
struct Storm {
    /// Status counts over every answer.
    statuses: HashMap<u16, usize>,
    /// Order ids answered per key (both instances' answers).
    answered: HashMap<String, Vec<i64>>,
    /// Batches that lost to contention.
    requeued: u64,
}

/// Sends each round's requests to the instances at once: `to_both`, every request to both, each
/// instance in its own random order; otherwise half to each, shuffled.
async fn storm(apps: &[TestApp; 2], sku: &str, to_both: bool, round: impl Fn(usize) -> Vec<Request>) -> Storm {
    let mut storm = Storm::default();
    let before = requeued_batches(&apps[0]).await;
    for r in 0..ROUNDS {
        let requests = round(r);
        let mut sends = Vec::new();
        for (i, app) in apps.iter().enumerate() {
            let mut mine: Vec<Request> = if to_both { requests.clone() } else { requests.iter().skip(i).step_by(2).cloned().collect() };
            mine.shuffle(&mut rand::rng());
            sends.extend(mine.into_iter().map(|request| async move {
                let response = app.order(sku, &request.user, 1, Some(&request.key)).await;
                let status = response.status();
                let body: Value = response.json().await.unwrap_or(Value::Null);
                (request.key, status, body)
            }));
        }
        for (key, status, body) in join_all(sends).await {
            *storm.statuses.entry(status.as_u16()).or_default() += 1;
            if let Some(id) = body["order_id"].as_i64() {
                storm.answered.entry(key).or_default().push(id);
            }
        }
    }
    storm.requeued = requeued_batches(&apps[0]).await - before;
    storm
}

/// Orders per idempotency key in PostgreSQL.
async fn orders_per_key(sku: &str) -> HashMap<String, i64> {
    let rows = db().await.query("SELECT idempotency_key, count(*) FROM orders WHERE sku = $1 GROUP BY 1", &[&sku]).await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// The same users and keys, every request to both instances.
fn retry_storm(label: &'static str) -> impl Fn(usize) -> Vec<Request> {
    move |r| (0..ROUND).map(|i| Request { user: format!("{label}-{r}-{i}"), key: format!("{label}-key-{r}-{i}") }).collect()
}

/// Eight users shared by both instances, a fresh key per request.
fn hot_users(label: &'static str) -> impl Fn(usize) -> Vec<Request> {
    move |r| (0..2 * ROUND).map(|i| Request { user: format!("{label}-user-{}", i % 8), key: format!("{label}-key-{r}-{i}") }).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_storm_across_instances_gets_one_order_per_key_and_no_failed_batch() {
    let apps = two_instances().await;
    let sku = apps[0].create_sale(big_sale(2)).await;

    let storm = storm(&apps, &sku, true, retry_storm("storm")).await;

    assert_eq!(storm.requeued, 0, "no batch lost to contention: {:?}", storm.statuses);
    let answered: usize = storm.statuses.iter().filter(|(s, _)| matches!(**s, 200 | 201)).map(|(_, n)| n).sum();
    assert_eq!(answered, 2 * ROUND * ROUNDS, "every request answered with its order or the replay: {:?}", storm.statuses);
    let stored = orders_per_key(&sku).await;
    assert_eq!(stored.len(), ROUND * ROUNDS, "one order per key");
    assert!(stored.values().all(|&n| n == 1), "no key has two orders");
    for (key, ids) in &storm.answered {
        assert_eq!(ids.len(), 2, "{key}: both instances answered");
        assert_eq!(ids[0], ids[1], "{key}: both answers name the same order");
    }
    let audit = apps[0].audit(&sku).await;
    assert_eq!(audit["consistent"], true, "{audit}");
    assert_eq!(audit["sold"], (ROUND * ROUNDS) as u64, "{audit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_few_hot_users_on_both_instances_fail_no_batch() {
    let apps = two_instances().await;
    let sku = apps[0].create_sale(big_sale(100_000)).await;

    let storm = storm(&apps, &sku, false, hot_users("hot")).await;

    assert_eq!(storm.requeued, 0, "no batch lost to contention: {:?}", storm.statuses);
    assert_eq!(storm.statuses.get(&201).copied().unwrap_or(0), 2 * ROUND * ROUNDS, "every order taken: {:?}", storm.statuses);
    let audit = apps[0].audit(&sku).await;
    assert_eq!(audit["consistent"], true, "{audit}");
    assert_eq!(audit["sold"], (2 * ROUND * ROUNDS) as u64, "{audit}");
}

/// A lone order is committed at once: with a linger of ten minutes it would
/// otherwise not be answered within the test's patience (a guard against hanging, not a speed
/// check: the order takes milliseconds).
#[tokio::test]
async fn a_lone_order_waits_for_no_linger() {
    let mut settings = test_settings();
    settings.batch.linger = Duration::from_secs(600);
    let app = spawn_app_with(settings).await;
    let sku = app.create_sale(big_sale(2)).await;

    let answered = tokio::time::timeout(Duration::from_secs(60), app.order(&sku, "lone", 1, Some("lone-1"))).await;

    let response = answered.expect("the lone order did not wait for the linger");
    assert_eq!(response.status(), StatusCode::CREATED);
}

/// A buyer PostgreSQL refused for the per-user limit is refused from memory while the refusal is
/// trusted, riding no batch: with the buyer's purchases cleared in PostgreSQL meanwhile (as a
/// cancelled order on another instance would), a batch would take the next order, and memory
/// still refuses it; a replay of the buyer's order is still answered with that order. The
/// control without the memory (trust 0) sends the order to a batch, which takes it.
#[tokio::test]
async fn a_buyer_refused_for_the_limit_is_refused_from_memory_while_trusted() {
    for (trust, after_clearing) in [(Duration::from_secs(600), StatusCode::CONFLICT), (Duration::ZERO, StatusCode::CREATED)] {
        let mut settings = test_settings();
        settings.owner.limit_refusal_trust = trust;
        let app = spawn_app_with(settings).await;
        let sku = app.create_sale(big_sale(1)).await;
        assert_eq!(app.order(&sku, "hot", 1, Some("hot-1")).await.status(), StatusCode::CREATED);
        assert_error(app.order(&sku, "hot", 1, Some("hot-2")).await, StatusCode::CONFLICT, "user_limit_reached").await;

        let cleared = db().await.execute("UPDATE user_purchases SET bought = 0 WHERE sku = $1 AND user_id = 'hot'", &[&sku]).await.unwrap();
        assert_eq!(cleared, 1);

        assert_eq!(app.order(&sku, "hot", 1, Some("hot-3")).await.status(), after_clearing, "limit refusals trusted for {trust:?}");
        assert_eq!(app.order(&sku, "hot", 1, Some("hot-1")).await.status(), StatusCode::OK, "the replay answers its order");
        app.stop().await;
    }
}

/// One batch, as the owner of shards 0 and 1 (fence 7) sends it to `seckill_commit_orders`.
struct Batch {
    orders: Vec<(&'static str, i32, Option<&'static str>)>,
    parts: Vec<(i32, i32, i32)>,
}

impl Batch {
    /// Orders of one unit each, all from shard 0.
    fn on_shard_0(orders: Vec<(&'static str, i32, Option<&'static str>)>) -> Self {
        let parts = orders.iter().enumerate().map(|(i, (_, q, _))| (i as i32 + 1, 0, *q)).collect();
        Self { orders, parts }
    }

    /// The outcomes, one per order, or the batch's single outcome (`deposed`, `stale_sale`).
    async fn commit(&self, sku: &str, generation: i64, fence: i64) -> Vec<String> {
        self.commit_with(&db().await, "", sku, generation, fence).await
    }

    /// The lines of `EXPLAIN (ANALYZE, BUFFERS)` of committing the batch on `db`.
    async fn explain(&self, db: &tokio_postgres::Client, sku: &str, generation: i64, fence: i64) -> Vec<String> {
        self.commit_with(db, EXPLAIN, sku, generation, fence).await
    }

    /// The rows' first column of `prefix` + the batch's commit, on `db`.
    async fn commit_with(&self, db: &tokio_postgres::Client, prefix: &str, sku: &str, generation: i64, fence: i64) -> Vec<String> {
        let rows = self.rows(db, prefix, "outcome", sku, generation, fence).await.unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    }

    /// The rows of `prefix` + the batch's commit on `db`, with the function's `columns`, or the
    /// error the statement failed with.
    async fn rows(
        &self,
        db: &tokio_postgres::Client,
        prefix: &str,
        columns: &str,
        sku: &str,
        generation: i64,
        fence: i64,
    ) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        let users: Vec<&str> = self.orders.iter().map(|o| o.0).collect();
        let quantities: Vec<i32> = self.orders.iter().map(|o| o.1).collect();
        let keys: Vec<Option<&str>> = self.orders.iter().map(|o| o.2).collect();
        let (part_order, part_shard, part_take): (Vec<i32>, Vec<i32>, Vec<i32>) = (
            self.parts.iter().map(|p| p.0).collect(),
            self.parts.iter().map(|p| p.1).collect(),
            self.parts.iter().map(|p| p.2).collect(),
        );
        let committed: Vec<i32> = vec![100, 100];
        let call = format!(
            "SELECT {columns} FROM seckill_commit_orders($1, $2, 2, true, true, '{{0,1}}', ARRAY[$3::bigint, $3::bigint], $4, \
             ARRAY[now(), now()], $5, $6, $7, $8, $9, $10) ORDER BY ord"
        );
        db.query(
            &format!("{prefix}{call}"),
            &[&sku, &generation, &fence, &committed, &users, &quantities, &keys, &part_order, &part_shard, &part_take],
        )
        .await
    }
}

/// A fresh sale of two shards of 100 units, per-user limit 2, claimed with fence 7 (in the database
/// `db` is connected to, the one `app` serves); its generation.
async fn sale_for_batches(app: &TestApp, db: &tokio_postgres::Client) -> (String, i64) {
    let sku =
        app.create_sale(json!({"total": 200, "shards": 2, "per_user_limit": 2, "max_per_order": 2, "strategy": "owned-shards"})).await;
    db.execute("UPDATE shards SET fence = 7 WHERE sku = $1", &[&sku]).await.unwrap();
    let generation = generation(db, &sku).await;
    (sku, generation)
}

/// The set-based function decides each order as the per-order loop did (migration 0008 names
/// the one deliberate difference: a replay by a user at the limit is a duplicate).
#[tokio::test]
async fn the_batch_function_decides_each_order_as_the_loop_did() {
    let app = spawn_app_with(test_settings()).await;
    let (sku, generation) = sale_for_batches(&app, &db().await).await;
    let outcomes = async |batch: Batch| batch.commit(&sku, generation, 7).await;

    // Plain orders.
    assert_eq!(outcomes(Batch::on_shard_0(vec![("ann", 1, Some("a1")), ("bob", 2, None)])).await, ["ok", "ok"]);
    // A user crossing the limit with two orders in one batch; the third fits again.
    assert_eq!(
        outcomes(Batch::on_shard_0(vec![("cat", 1, None), ("cat", 2, None), ("cat", 1, None)])).await,
        ["ok", "user_limit", "ok"]
    );
    // A user already at the limit (ann has 1 of 2, then 2 of 2), and a quantity above it.
    assert_eq!(
        outcomes(Batch::on_shard_0(vec![("ann", 1, None), ("ann", 1, None), ("dan", 3, None)])).await,
        ["ok", "user_limit", "user_limit"]
    );
    // A key repeated within the batch, and keys matching an earlier order: its replay, and its
    // reuse by another buyer, both answered with that order (the instance tells them apart).
    assert_eq!(
        outcomes(Batch::on_shard_0(vec![("eve", 1, Some("e1")), ("eve", 1, Some("e1")), ("ann", 1, Some("a1")), ("fay", 1, Some("a1"))]))
            .await,
        ["ok", "duplicate", "earlier", "earlier"]
    );
    // Orders over several shards.
    let spread = Batch { orders: vec![("gus", 2, Some("g1")), ("hal", 1, None)], parts: vec![(1, 0, 1), (1, 1, 1), (2, 1, 1)] };
    assert_eq!(outcomes(spread).await, ["ok", "ok"]);
    // A refused fence and a stale generation write nothing.
    assert_eq!(Batch::on_shard_0(vec![("ivy", 1, None)]).commit(&sku, generation, 6).await, ["deposed", "deposed"]);
    assert_eq!(Batch::on_shard_0(vec![("jon", 1, None)]).commit(&sku, generation.wrapping_add(1), 7).await, ["stale_sale"]);

    let db = db().await;
    let bought: HashMap<String, i32> = db
        .query("SELECT user_id, bought FROM user_purchases WHERE sku = $1", &[&sku])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let expected: HashMap<String, i32> =
        [("ann", 2), ("bob", 2), ("cat", 2), ("eve", 1), ("gus", 2), ("hal", 1)].into_iter().map(|(u, n)| (u.to_string(), n)).collect();
    assert_eq!(bought.into_iter().filter(|(_, n)| *n > 0).collect::<HashMap<_, _>>(), expected);
    let parts: i64 = db.query_one("SELECT count(*) FROM order_parts WHERE sku = $1", &[&sku]).await.unwrap().get(0);
    assert_eq!(parts, 9, "one part per accepted order and shard");
    // Only gus's order was taken from two shards: it alone has part rows of its own (migration
    // 0027); every other order's part is its own row.
    let split: Vec<(String, i32)> = db
        .query(
            "SELECT o.user_id, p.shard FROM order_split_parts p JOIN orders o ON o.id = p.order_id WHERE p.sku = $1 ORDER BY 2",
            &[&sku],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(split, [("gus".to_string(), 0), ("gus".to_string(), 1)]);
    let remaining: Vec<i32> =
        db.query("SELECT remaining FROM shards WHERE sku = $1 ORDER BY shard", &[&sku]).await.unwrap().iter().map(|r| r.get(0)).collect();
    // Each batch writes its committed stock (100) minus what it took, as the owner's memory would.
    assert_eq!(remaining, [99, 98], "the last batch that wrote: gus's 1 + hal's 1 from shard 1, gus's 1 from shard 0");
}

/// An outcome row with the order it names: outcome, order id, buyer, units, shard, fence.
type EarlierRow = (String, Option<i64>, Option<String>, Option<i32>, Option<i32>, Option<i64>);

/// A key that a committed order holds comes back with that order, from the batch itself: its id,
/// buyer, quantity, first shard and fence as `orders` has them, for a replay and for the key's
/// reuse by another buyer alike (the instance tells them apart), within the batch too.
#[tokio::test]
async fn a_batch_answers_a_used_key_with_the_order_that_holds_it() {
    let app = spawn_app_with(test_settings()).await;
    let db = db().await;
    let (sku, generation) = sale_for_batches(&app, &db).await;
    let spread = Batch { orders: vec![("gus", 2, Some("g1"))], parts: vec![(1, 1, 1), (1, 0, 1)] };
    assert_eq!(spread.commit(&sku, generation, 7).await, ["ok"]);
    let stored = db
        .query_one("SELECT id, user_id, quantity, shard, fence FROM orders WHERE sku = $1 AND idempotency_key = 'g1'", &[&sku])
        .await
        .unwrap();
    let stored = (
        stored.get::<_, i64>(0),
        stored.get::<_, String>(1),
        stored.get::<_, i32>(2),
        stored.get::<_, i32>(3),
        stored.get::<_, i64>(4),
    );
    assert_eq!((stored.1.as_str(), stored.2, stored.3, stored.4), ("gus", 2, 0, 7), "the first shard and the owner's fence");

    let again = Batch::on_shard_0(vec![("gus", 2, Some("g1")), ("hal", 1, Some("g1")), ("ivy", 1, Some("i1"))]);
    let rows = again.rows(&db, "", "outcome, order_id, buyer, units, shard, fence", &sku, generation, 7).await.unwrap();

    let answered: Vec<EarlierRow> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5))).collect();
    let earlier = ("earlier".to_string(), Some(stored.0), Some(stored.1), Some(stored.2), Some(stored.3), Some(stored.4));
    assert_eq!(answered[..2], [earlier.clone(), earlier]);
    assert_eq!((answered[2].0.as_str(), answered[2].2.as_deref()), ("ok", None));
    let orders: i64 = db.query_one("SELECT count(*) FROM orders WHERE sku = $1", &[&sku]).await.unwrap().get(0);
    assert_eq!(orders, 2, "the used key wrote nothing");
}

/// The batch function as migration 0024 defined it, which locked the buyer of every order of the
/// batch, in place of today's: the control of the test below. Its part rows go to the table that
/// holds them since 0027 (`order_parts` is a view now); nothing in the test reads them.
fn commit_orders_of_0024() -> String {
    let migration = include_str!("../../migrations/0024_batches_answer_replays.sql");
    let function = &migration[migration.find("CREATE FUNCTION").unwrap()..];
    function.replacen("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1).replacen(
        "INSERT INTO order_parts",
        "INSERT INTO order_split_parts",
        1,
    )
}

/// A batch carrying a replay of `gus`'s order and a fresh order of `ivy`, sent while another
/// transaction holds `gus`'s row (as another instance's batch of the same buyer would), with the
/// batch function `function` if given: its outcomes, or the SQLSTATE it failed with once it had
/// waited 300 ms for a lock.
async fn replay_while_its_buyer_is_held(label: &str, function: Option<String>) -> Result<Vec<String>, String> {
    let scratch = ScratchApp::start(label, test_settings()).await;
    let db = db_at(&scratch.url).await;
    if let Some(function) = function {
        db.batch_execute(&function).await.unwrap();
    }
    let (sku, generation) = sale_for_batches(&scratch.app, &db).await;
    let first = Batch::on_shard_0(vec![("gus", 1, Some("g1"))]);
    assert_eq!(first.commit_with(&db, "", &sku, generation, 7).await, ["ok"]);

    let mut holder = db_at(&scratch.url).await;
    let hold = holder.transaction().await.unwrap();
    hold.execute("SELECT FROM user_purchases WHERE sku = $1 AND user_id = 'gus' FOR UPDATE", &[&sku]).await.unwrap();
    db.batch_execute("SET lock_timeout = '300ms'").await.unwrap();
    let replay = Batch::on_shard_0(vec![("gus", 1, Some("g1")), ("ivy", 1, Some("i1"))]);
    let outcome = replay
        .rows(&db, "", "outcome", &sku, generation, 7)
        .await
        .map(|rows| rows.iter().map(|r| r.get(0)).collect())
        .map_err(|e| e.code().map_or_else(|| e.to_string(), |c| c.code().to_string()));
    hold.rollback().await.unwrap();
    drop((db, holder));
    scratch.finish().await;
    outcome
}

/// A replay takes nothing, so a batch leaves its buyer's row alone: it neither waits for nor
/// holds it, and decides its other orders as if the replay were not there (migration 0025).
/// Control: the function as 0024 defined it locks the replay's buyer too, and waits.
#[tokio::test]
async fn a_replay_does_not_wait_for_its_buyers_row() {
    let outcome = replay_while_its_buyer_is_held("replay_buyer", None).await;

    assert_eq!(outcome.expect("the batch commits without waiting"), ["earlier", "ok"]);
}

#[tokio::test]
async fn control_the_batch_of_0024_waits_for_a_replays_buyer() {
    let outcome = replay_while_its_buyer_is_held("replay_buyer_0024", Some(commit_orders_of_0024())).await;

    assert_eq!(outcome, Err("55P03".to_string()), "lock_not_available: it waited for the replay's buyer");
}

/// The duplicate-key probe as migration 0013 wrote it, alone in a function planned as the batch
/// function's statements are: the control of the test below.
const KEY_PROBE_BEFORE_0018: &str = "
    CREATE FUNCTION key_probe_before_0018(p_sku text, p_keys text[], p_quantities integer[], p_limit integer)
    RETURNS integer[] LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
    DECLARE v_duplicate integer[];
    BEGIN
        SELECT coalesce(array_agg(d.n), '{}') INTO v_duplicate
          FROM (SELECT x.n, x.k, row_number() OVER (PARTITION BY x.k ORDER BY x.n) AS nth
                  FROM unnest(p_keys, p_quantities) WITH ORDINALITY AS x(k, q, n)
                 WHERE x.k IS NOT NULL AND x.q <= p_limit) AS d
         WHERE d.nth > 1 OR EXISTS (SELECT 1 FROM orders o WHERE o.sku = p_sku AND o.idempotency_key = d.k);
        RETURN v_duplicate;
    END
    $$";

/// A batch probes its own keys, whatever the sale holds: a connection whose plans were made while
/// the sale had no orders (a fresh database, tables just analyzed empty, as `make bench` starts)
/// still reads a handful of buffers per batch after the sale has 20 000 orders (migration 0018).
/// Control: the probe as it was, planned the same way on the same connection, reads every key of
/// the sale (a hashed subplan), so the same bound fails.
#[tokio::test]
async fn a_batch_reads_its_own_keys_not_every_order_of_the_sale() {
    let scratch = ScratchApp::start("key_probe", test_settings()).await;
    let db = db_at(&scratch.url).await;
    let (sku, generation) = sale_for_batches(&scratch.app, &db).await;
    db.batch_execute(KEY_PROBE_BEFORE_0018).await.unwrap();
    db.batch_execute("ANALYZE orders").await.unwrap();
    let probe_before_0018 = "SELECT key_probe_before_0018($1, ARRAY['k1'], ARRAY[1], 2)";

    // Both plans are made now, on an empty orders table, and kept for the connection.
    let first = Batch::on_shard_0(vec![("ann", 1, Some("first"))]);
    assert_eq!(first.commit_with(&db, "", &sku, generation, 7).await, ["ok"]);
    db.execute(probe_before_0018, &[&sku]).await.unwrap();
    insert_bulk_orders(&db, &sku, 7, "", "").await;

    let batch = buffers_touched(&Batch::on_shard_0(vec![("bob", 1, Some("k1"))]).explain(&db, &sku, generation, 7).await);
    let control = buffers_touched(&explain(&db, probe_before_0018, &[&sku]).await);
    drop(db);
    scratch.finish().await;
    let bound = 200;
    assert!(batch < bound, "a one-order batch touched {batch} buffers with {BULK_ORDERS} orders in the sale");
    assert!(control >= bound, "control: the probe before 0018 touched only {control} buffers: the bound cannot tell them apart");
}

/// Whether both backends `pids` come to wait on a lock (polled, bounded).
async fn both_wait_on_a_lock(admin: &tokio_postgres::Client, pids: &[i32]) -> bool {
    eventually(async || {
        let waiting: i64 = admin
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY ($1) AND wait_event_type = 'Lock'", &[&pids])
            .await
            .unwrap()
            .get(0);
        waiting == 2
    })
    .await
}

/// What two batches contend for.
#[derive(Clone, Copy)]
enum Contended {
    /// The same ten users (fresh keys each).
    Users,
    /// The same ten idempotency keys (different users).
    Keys,
}

/// Two batches, as the owners of shard 0 (fence 7) and shard 1 (fence 8), that want the same ten
/// users or keys, the second in the opposite order. A third transaction holds the middle row
/// (an uncommitted insert) until both batches wait on a lock, then rolls back. Each batch's
/// outcome: its rows, or the SQLSTATE it failed with.
async fn opposite_batches(sorted: bool, contended: Contended) -> [Result<Vec<String>, String>; 2] {
    let app = spawn_app_with(test_settings()).await;
    let sku =
        app.create_sale(json!({"total": 200, "shards": 2, "per_user_limit": 2, "max_per_order": 2, "strategy": "owned-shards"})).await;
    let admin = db().await;
    admin.execute("UPDATE shards SET fence = 7 + shard WHERE sku = $1", &[&sku]).await.unwrap();
    let generation = generation(&admin, &sku).await;
    let names = |prefix: &str| -> Vec<String> { (0..10).map(|i| format!("{prefix}{i}")).collect() };
    let (users, keys): ([Vec<String>; 2], [Vec<String>; 2]) = match contended {
        Contended::Users => ([names("u"), names("u")], [names("a"), names("b")]),
        Contended::Keys => ([names("a"), names("b")], [names("k"), names("k")]),
    };

    let mut holder = db().await;
    let hold = holder.transaction().await.unwrap();
    match contended {
        Contended::Users => hold.execute("INSERT INTO user_purchases VALUES ($1, 'u5', 0)", &[&sku]).await.unwrap(),
        Contended::Keys => hold
            .execute("INSERT INTO orders (sku, user_id, quantity, shard, fence, idempotency_key) VALUES ($1, 'x', 1, 0, 7, 'k5')", &[&sku])
            .await
            .unwrap(),
    };
    let mut pids = Vec::new();
    let mut batches = Vec::new();
    for side in 0..2 {
        let client = db().await;
        pids.push(client.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get::<_, i32>(0));
        let (mut users, mut keys) = (users[side].clone(), keys[side].clone());
        if side == 1 {
            users.reverse();
            keys.reverse();
        }
        let (sku, fence, shard) = (sku.clone(), 7 + side as i64, side as i32);
        batches.push(tokio::spawn(async move {
            let orders = users.len() as i32;
            let part_order: Vec<i32> = (1..=orders).collect();
            let rows = client
                .query(
                    "SELECT outcome FROM seckill_commit_orders($1, $2, 2, true, $3, ARRAY[$4::int], ARRAY[$5::bigint], '{100}', \
                     ARRAY[now()], $6, array_fill(1, ARRAY[$7::int]), $8, $9, array_fill($4::int, ARRAY[$7::int]), \
                     array_fill(1, ARRAY[$7::int])) ORDER BY ord",
                    &[&sku, &generation, &sorted, &shard, &fence, &users, &orders, &keys, &part_order],
                )
                .await;
            rows.map(|rows| rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>())
                .map_err(|e| e.code().map_or_else(|| e.to_string(), |c| c.code().to_string()))
        }));
    }
    let both_wait = both_wait_on_a_lock(&admin, &pids).await;
    assert!(both_wait, "both batches wait on a lock");
    hold.rollback().await.unwrap();

    let mut outcomes = Vec::new();
    for batch in batches {
        outcomes.push(batch.await.unwrap());
    }
    assert_eq!(buyer_counts(&admin, &sku).await, written_units(&admin, &sku).await, "each buyer's count is what its orders took");
    [outcomes.remove(0), outcomes.remove(0)]
}

/// Each buyer's count in `user_purchases` (zeros left out).
async fn buyer_counts(db: &tokio_postgres::Client, sku: &str) -> HashMap<String, i64> {
    let rows = db.query("SELECT user_id, bought::bigint FROM user_purchases WHERE sku = $1 AND bought <> 0", &[&sku]).await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// The units of each buyer's orders in `orders`.
async fn written_units(db: &tokio_postgres::Client, sku: &str) -> HashMap<String, i64> {
    let rows = db.query("SELECT user_id, sum(quantity)::bigint FROM orders WHERE sku = $1 GROUP BY 1", &[&sku]).await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

#[tokio::test]
async fn batches_wanting_the_same_users_in_opposite_orders_queue_instead_of_deadlocking() {
    let [first, second] = opposite_batches(true, Contended::Users).await;

    assert_eq!(first.expect("the first batch commits"), vec!["ok"; 10]);
    assert_eq!(second.expect("the second batch commits"), vec!["ok"; 10]);
}

#[tokio::test]
async fn batches_wanting_the_same_keys_in_opposite_orders_queue_instead_of_deadlocking() {
    let [first, second] = opposite_batches(true, Contended::Keys).await;

    // Whichever took the first key wrote the orders; the other's keys are replays.
    let mut outcomes = [first.expect("one batch commits"), second.expect("the other batch commits")];
    outcomes.sort();
    assert_eq!(outcomes, [vec!["duplicate"; 10], vec!["ok"; 10]]);
}

#[tokio::test]
async fn control_arrival_order_batches_deadlock_on_the_same_users() {
    let outcomes = opposite_batches(false, Contended::Users).await;

    assert!(outcomes.iter().any(|o| o.as_ref().is_err_and(|code| code == "40P01")), "a deadlock: {outcomes:?}");
}

#[tokio::test]
async fn control_arrival_order_batches_deadlock_on_the_same_keys() {
    let outcomes = opposite_batches(false, Contended::Keys).await;

    assert!(outcomes.iter().any(|o| o.as_ref().is_err_and(|code| code == "40P01")), "a deadlock: {outcomes:?}");
}

/// A batch that loses to another transaction (here one that holds the buyer's row past the
/// batch's `lock_timeout`) wrote nothing, and the database answers: the owner keeps its shard,
/// its order rides in the next batch and is committed once the row is free, and the instance
/// goes into no "database trouble" back-off (the next order is taken at once). Before, such a
/// batch gave the shards back and answered 503 for a while.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_that_lost_to_contention_keeps_its_shard_and_its_order() {
    let mut settings = test_settings();
    settings.owner.write_timeout = Duration::from_millis(400);
    let app = spawn_app_with(settings).await;
    let sku = app.create_sale(big_sale(2)).await;
    assert_eq!(app.order(&sku, "warm", 1, Some("warm-1")).await.status(), StatusCode::CREATED);
    let fences = |body: Value| -> Vec<i64> { body["shards"].as_array().unwrap().iter().map(|s| s["fence"].as_i64().unwrap()).collect() };
    let owned_before = fences(app.get_json(&format!("/v1/sales/{sku}/owners")).await.1);
    let requeued_before = requeued_batches(&app).await;
    let mut holder = db().await;
    let hold = holder.transaction().await.unwrap();
    hold.execute("INSERT INTO user_purchases VALUES ($1, 'blocked', 0)", &[&sku]).await.unwrap();

    let blocked = {
        let (http, url) = (app.http.clone(), format!("{}/v1/sales/{sku}/orders", app.address));
        tokio::spawn(async move {
            http.post(url)
                .header("Idempotency-Key", "blocked-1")
                .json(&json!({"user_id": "blocked", "quantity": 1}))
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    assert!(eventually(async || requeued_batches(&app).await > requeued_before).await, "the batch lost to the held row");
    hold.rollback().await.unwrap();

    assert_eq!(blocked.await.unwrap(), StatusCode::CREATED, "its order rode in the next batch");
    assert_eq!(app.order(&sku, "after", 1, Some("after-1")).await.status(), StatusCode::CREATED, "no back-off");
    let owned_after = fences(app.get_json(&format!("/v1/sales/{sku}/owners")).await.1);
    assert!(
        owned_before.iter().all(|f| owned_after.contains(f)),
        "the shard is still owned under its fence: {owned_before:?} -> {owned_after:?}"
    );
    assert_eq!(app.audit(&sku).await["consistent"], true);
}

/// Two batches of deposed owners of the same shard at once: each holds the sale row FOR SHARE
/// while it waits for the shard row, and each counts its refusal. They used to count it in the
/// sale's row, which waits for the other's share lock while the other waits for the shard row: a
/// deadlock (40P01) every time. Both are refused now, and both refusals are counted.
#[tokio::test]
async fn two_deposed_batches_at_once_are_both_refused_and_counted() {
    let app = spawn_app_with(test_settings()).await;
    let (sku, generation) = sale_for_batches(&app, &db().await).await;
    let admin = db().await;
    let mut holder = db().await;
    let hold = holder.transaction().await.unwrap();
    hold.execute("SELECT 1 FROM shards WHERE sku = $1 AND shard = 0 FOR UPDATE", &[&sku]).await.unwrap();
    let mut pids = Vec::new();
    let mut batches = Vec::new();
    for side in 0..2 {
        let client = db().await;
        pids.push(client.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get::<_, i32>(0));
        let (sku, user) = (sku.clone(), format!("deposed-{side}"));
        batches.push(tokio::spawn(async move {
            client
                .query(
                    "SELECT outcome FROM seckill_commit_orders($1, $2, 2, true, true, '{0}', '{6}', '{100}', ARRAY[now()], \
                     ARRAY[$3], '{1}', ARRAY[NULL::text], '{1}', '{0}', '{1}')",
                    &[&sku, &generation, &user],
                )
                .await
                .map(|rows| rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>())
                .map_err(|e| e.code().map_or_else(|| e.to_string(), |c| c.code().to_string()))
        }));
    }
    let both_wait = both_wait_on_a_lock(&admin, &pids).await;
    assert!(both_wait, "both batches wait for the shard row");

    hold.rollback().await.unwrap();

    for batch in batches {
        assert_eq!(batch.await.unwrap(), Ok(vec!["deposed".to_string()]));
    }
    assert_eq!(app.audit(&sku).await["fence_rejections"], 2);
}
