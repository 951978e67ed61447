//! `redis-gate` and `redis-gate-durable`: exact sales on two instances, the per-user limit,
//! replays, a dead consumer's entry claimed and written once, and reconciliation.

use std::time::Duration;

use reqwest::StatusCode;
use seckill::config::Settings;
use serde_json::{Value, json};

use crate::{
    helpers::{
        ADMIN_TOKEN, BULK_ORDERS, EXPLAIN, ScratchApp, TestApp, assert_error, buffers_touched, db, db_at, explain, generation,
        insert_bulk_orders, spawn_app_with, test_settings,
    },
    orders::redis_url,
};

/// Short claim times, so a dead consumer's entries are taken over within the test's patience.
fn gate_settings() -> Settings {
    let mut settings = test_settings();
    settings.gate.claim_idle = Duration::from_millis(300);
    settings.gate.claim_interval = Duration::from_millis(100);
    settings
}

fn sale(total: u32, shards: u32, limit: u32, strategy: &str) -> Value {
    json!({"total": total, "shards": shards, "per_user_limit": limit, "max_per_order": 2, "strategy": strategy})
}

async fn redis() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}

fn stream(sku: &str) -> String {
    format!("{{seckill:gate:{sku}}}:stream")
}

/// Waits until the sale's stream is empty (every entry written and acknowledged).
async fn wait_drained(sku: &str) {
    let mut conn = redis().await;
    for _ in 0..500 {
        let len: i64 = redis::cmd("XLEN").arg(stream(sku)).query_async(&mut conn).await.unwrap();
        if len == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the queue of {sku} did not drain");
}

/// Orders as `user`, retrying `503` a while; the final status and body.
async fn buy(app: &TestApp, sku: &str, user: &str, quantity: i64, key: Option<&str>) -> (StatusCode, Value) {
    for _ in 0..100 {
        let response = app.order(sku, user, quantity, key).await;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status != StatusCode::SERVICE_UNAVAILABLE {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("still 503 after 100 tries");
}

async fn reconcile(app: &TestApp, sku: &str, query: &str) -> reqwest::Response {
    app.http.post(format!("{}/v1/sales/{sku}/reconcile{query}", app.address)).bearer_auth(ADMIN_TOKEN).send().await.unwrap()
}

async fn orders_with_ref(sku: &str, gate_ref: i64) -> i64 {
    let row = db().await.query_one("SELECT count(*) FROM orders WHERE sku = $1 AND gate_ref = $2", &[&sku, &gate_ref]).await.unwrap();
    row.get(0)
}

#[tokio::test]
async fn both_modes_sell_exactly_the_stock_from_two_instances() {
    let (a, b) = (spawn_app_with(gate_settings()).await, spawn_app_with(gate_settings()).await);
    for strategy in ["redis-gate", "redis-gate-durable"] {
        let sku = a.create_sale(sale(120, 4, 2, strategy)).await;

        let buyers = (0..100).map(|i| {
            let (app, sku) = (if i % 2 == 0 { &a } else { &b }, sku.clone());
            async move { buy(app, &sku, &format!("user-{i}"), 2, None).await }
        });
        let answers = futures_util::future::join_all(buyers).await;
        wait_drained(&sku).await;

        let created = answers.iter().filter(|(s, _)| *s == StatusCode::CREATED).count();
        let sold_out = answers.iter().filter(|(s, b)| *s == StatusCode::CONFLICT && b["error"] == "sold_out").count();
        assert_eq!((created, sold_out), (60, 40), "{strategy}: {answers:?}");
        let audit = a.audit(&sku).await;
        assert_eq!(audit["sold"], 120, "{strategy}: {audit}");
        assert_eq!(audit["remaining"], 0, "{strategy}: {audit}");
        assert_eq!(audit["oversold"], 0, "{strategy}: {audit}");
        assert_eq!(audit["consistent"], true, "{strategy}: {audit}");
        assert_eq!(audit["stranded"], 0, "{strategy}: {audit}");
        assert_eq!(audit["users_over_limit"], 0, "{strategy}: {audit}");
    }
}

#[tokio::test]
async fn a_durable_order_is_in_postgres_when_acknowledged() {
    let app = spawn_app_with(gate_settings()).await;
    let sku = app.create_sale(sale(10, 2, 2, "redis-gate-durable")).await;

    let (status, body) = buy(&app, &sku, "durable-user", 1, None).await;

    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(orders_with_ref(&sku, body["order_id"].as_i64().unwrap()).await, 1);
}

#[tokio::test]
async fn the_per_user_limit_holds() {
    let app = spawn_app_with(gate_settings()).await;
    for strategy in ["redis-gate", "redis-gate-durable"] {
        let sku = app.create_sale(sale(10, 2, 2, strategy)).await;

        assert_eq!(buy(&app, &sku, "greedy", 2, None).await.0, StatusCode::CREATED);
        let refused = app.order(&sku, "greedy", 1, None).await;

        assert_error(refused, StatusCode::CONFLICT, "user_limit_reached").await;
        wait_drained(&sku).await;
        assert_eq!(app.audit(&sku).await["sold"], 2);
    }
}

#[tokio::test]
async fn a_replayed_key_returns_the_original_order() {
    let app = spawn_app_with(gate_settings()).await;
    for strategy in ["redis-gate", "redis-gate-durable"] {
        let sku = app.create_sale(sale(10, 2, 2, strategy)).await;

        let (first, original) = buy(&app, &sku, "replayer", 1, Some("key-1")).await;
        let (again, replayed) = buy(&app, &sku, "replayer", 1, Some("key-1")).await;
        let other = app.order(&sku, "replayer", 2, Some("key-1")).await;

        assert_eq!((first, again), (StatusCode::CREATED, StatusCode::OK));
        assert_eq!(original, replayed);
        assert_error(other, StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused").await;
        wait_drained(&sku).await;
        let audit = app.audit(&sku).await;
        assert_eq!((audit["sold"].as_i64(), audit["duplicates"].as_i64()), (Some(1), Some(0)), "{audit}");
    }
}

/// An entry read by a consumer that dies before acknowledging it is claimed by the service's
/// consumer after the idle time and written once; the same entry enqueued twice lands once too.
/// Reconciliation refuses meanwhile.
#[tokio::test]
async fn a_dead_consumers_entry_is_claimed_and_written_exactly_once() {
    let app = spawn_app_with(gate_settings()).await;
    let sku = app.create_sale(sale(10, 2, 2, "redis-gate")).await;
    let generation = generation(&db().await, &sku).await;
    let mut conn = redis().await;
    let gate_ref: i64 = redis::cmd("INCR").arg(format!("{{seckill:gate:{sku}}}:seq")).query_async(&mut conn).await.unwrap();
    let entry = |c: &mut redis::Cmd| {
        c.arg(stream(&sku)).arg("*").arg("ref").arg(gate_ref).arg("gen").arg(generation);
        c.arg("user").arg("claimed-user").arg("qty").arg(1).arg("key").arg("").arg("parts").arg("0:1");
    };
    // The service's consumer may read new entries first; a fake consumer that reads them before
    // it needs the service's writer idle, so the entry is added and read in one transaction.
    let mut xadd = redis::cmd("XADD");
    entry(&mut xadd);
    let mut read = redis::cmd("XREADGROUP");
    read.arg("GROUP").arg("writers").arg("fake-dead-consumer").arg("COUNT").arg(100).arg("STREAMS").arg(stream(&sku)).arg(">");
    let (_, taken): (String, redis::Value) =
        redis::pipe().atomic().add_command(xadd).add_command(read).query_async(&mut conn).await.unwrap();
    let taken = format!("{taken:?}");
    assert!(taken.contains("claimed-user"), "the fake consumer holds the entry: {taken}");

    let refused = reconcile(&app, &sku, "").await;
    assert_error(refused, StatusCode::CONFLICT, "queue_not_drained").await;

    wait_drained(&sku).await;
    assert_eq!(orders_with_ref(&sku, gate_ref).await, 1);

    let mut twice = redis::cmd("XADD");
    entry(&mut twice);
    let _: String = twice.query_async(&mut conn).await.unwrap();
    wait_drained(&sku).await;
    assert_eq!(orders_with_ref(&sku, gate_ref).await, 1, "written twice, landed once");
    let audit = app.audit(&sku).await;
    assert_eq!((audit["sold"].as_i64(), audit["consistent"].as_bool()), (Some(1), Some(true)), "{audit}");

    // Control: what keeps it at one is the unique reference; a second row with it is refused.
    let duplicate = db()
        .await
        .execute("INSERT INTO orders (sku, user_id, quantity, shard, fence, gate_ref) VALUES ($1, 'x', 1, 0, 0, $2)", &[&sku, &gate_ref])
        .await;
    assert_eq!(duplicate.unwrap_err().code(), Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION));
}

#[tokio::test]
async fn reconciliation_reports_and_repairs_what_redis_lost() {
    let app = spawn_app_with(gate_settings()).await;
    let sku = app.create_sale(sale(20, 2, 2, "redis-gate")).await;
    for user in ["r-1", "r-2"] {
        assert_eq!(buy(&app, &sku, user, 2, None).await.0, StatusCode::CREATED);
    }
    wait_drained(&sku).await;
    // Behind the service's back (a restored snapshot, a hand edit): 3 units of shard 0
    // decremented without an order.
    let mut conn = redis().await;
    let tag = format!("{{seckill:gate:{sku}}}");
    let _: () = redis::pipe()
        .cmd("HINCRBY")
        .arg(format!("{tag}:stock"))
        .arg(0)
        .arg(-3)
        .cmd("HINCRBY")
        .arg(format!("{tag}:meta"))
        .arg("left")
        .arg(-3)
        .query_async(&mut conn)
        .await
        .unwrap();

    let response = reconcile(&app, &sku, "?drain=1").await;

    assert_eq!(response.status(), StatusCode::OK);
    let report: Value = response.json().await.unwrap();
    assert_eq!(report["undersold"], 3, "{report}");
    assert_eq!(report["oversold"], 0, "{report}");
    assert_eq!(report["shards"][0]["undersold"], 3, "{report}");
    let again: Value = reconcile(&app, &sku, "").await.json().await.unwrap();
    assert_eq!(again["undersold"].as_i64(), Some(0), "repaired: {again}");
    // Every unit sells after the repair, and no more.
    let mut sold = 4;
    for i in 0..20 {
        match buy(&app, &sku, &format!("after-{i}"), 2, None).await {
            (StatusCode::CREATED, _) => sold += 2,
            (StatusCode::CONFLICT, _) => break,
            other => panic!("{other:?}"),
        }
    }
    wait_drained(&sku).await;
    assert_eq!(sold, 20);
    assert_eq!(app.audit(&sku).await["sold"], 20);
}

/// Reconciliation copies the buyers back a chunk at a time (1000) and swaps them in whole: after
/// it, Redis counts every buyer PostgreSQL counts (2501 here, over three chunks) and enforces
/// their limit, the hash does not expire with the copy it was, and no copy is left behind.
#[tokio::test]
async fn reconciliation_restores_every_buyers_count_over_several_chunks() {
    let app = spawn_app_with(gate_settings()).await;
    let sku = app.create_sale(sale(10, 2, 2, "redis-gate")).await;
    assert_eq!(buy(&app, &sku, "chunked-buyer", 1, None).await.0, StatusCode::CREATED);
    wait_drained(&sku).await;
    // PostgreSQL counts 2500 more buyers, at the limit; Redis lost every buyer.
    db().await
        .execute("INSERT INTO user_purchases (sku, user_id, bought) SELECT $1, 'bulk-' || g, 2 FROM generate_series(1, 2500) g", &[&sku])
        .await
        .unwrap();
    let users = format!("{{seckill:gate:{sku}}}:users");
    let mut conn = redis().await;
    let _: () = redis::cmd("DEL").arg(&users).query_async(&mut conn).await.unwrap();

    let response = reconcile(&app, &sku, "?drain=1").await;

    assert_eq!(response.status(), StatusCode::OK);
    let counted: i64 = redis::cmd("HLEN").arg(&users).query_async(&mut conn).await.unwrap();
    assert_eq!(counted, 2501);
    let (first, last, mine): (i64, i64, i64) =
        redis::pipe().hget(&users, "bulk-1").hget(&users, "bulk-2500").hget(&users, "chunked-buyer").query_async(&mut conn).await.unwrap();
    assert_eq!((first, last, mine), (2, 2, 1));
    let ttl: i64 = redis::cmd("PTTL").arg(&users).query_async(&mut conn).await.unwrap();
    assert_eq!(ttl, -1, "the buyers' hash would expire with the copy it was");
    let copies: Vec<String> = redis::cmd("KEYS").arg(format!("{users}:staged:*")).query_async(&mut conn).await.unwrap();
    assert!(copies.is_empty(), "copies left behind: {copies:?}");
    assert_error(app.order(&sku, "bulk-1777", 1, None).await, StatusCode::CONFLICT, "user_limit_reached").await;
}

#[tokio::test]
async fn reconciliation_needs_the_admin_token_and_a_gate_sale() {
    let app = spawn_app_with(gate_settings()).await;
    let other = app.create_sale(sale(10, 2, 2, "db-atomic")).await;

    let anonymous = app.http.post(format!("{}/v1/sales/{other}/reconcile", app.address)).send().await.unwrap();
    assert_error(anonymous, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_error(reconcile(&app, &other, "").await, StatusCode::CONFLICT, "not_redis_gate").await;
    assert_error(reconcile(&app, "no-such-sale-xyz", "").await, StatusCode::NOT_FOUND, "unknown_sale").await;
}

/// After Redis lost a sale's keys, the references start above every one handed out before, also
/// one that was lost with the stream before it reached PostgreSQL: a reference names one order.
#[tokio::test]
async fn references_are_never_handed_out_twice_after_redis_lost_the_sale() {
    let app = spawn_app_with(gate_settings()).await;
    let sku = app.create_sale(sale(10, 2, 2, "redis-gate")).await;
    let (status, first) = buy(&app, &sku, "ref-a", 1, None).await;
    assert_eq!(status, StatusCode::CREATED);
    wait_drained(&sku).await;
    let first = first["order_id"].as_i64().unwrap();
    // An order handed the next reference, then lost with Redis before its writer got it.
    let mut conn = redis().await;
    let lost: i64 = redis::cmd("INCR").arg(format!("{{seckill:gate:{sku}}}:seq")).query_async(&mut conn).await.unwrap();
    assert_eq!(lost, first + 1);
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{{seckill:gate:{sku}}}*")).query_async(&mut conn).await.unwrap();
    let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.unwrap();

    let (status, next) = buy(&app, &sku, "ref-b", 1, None).await;

    assert_eq!(status, StatusCode::CREATED, "{next}");
    let next = next["order_id"].as_i64().unwrap();
    assert!(next > lost, "reference {next} after the lost {lost}: seeding from PostgreSQL alone would hand out {lost} again");
    let bought: i64 = redis::cmd("HGET").arg(format!("{{seckill:gate:{sku}}}:users")).arg("ref-a").query_async(&mut conn).await.unwrap();
    assert_eq!(bought, 1, "the seed brought the buyers' counts back from PostgreSQL");
}

/// Entries as the gate's writer hands them to `seckill_gate_write`: one unit each, from shard 0 or
/// 1 by position.
struct GateEntries {
    refs: Vec<i64>,
    generations: Vec<i64>,
    users: Vec<&'static str>,
    keys: Vec<Option<&'static str>>,
}

impl GateEntries {
    /// The rows' first column of `prefix` + writing the entries of `sku`, on `db`: the outcomes in
    /// entry order, or EXPLAIN's lines.
    async fn write_with(&self, db: &tokio_postgres::Client, prefix: &str, sku: &str) -> Vec<String> {
        let n = self.refs.len() as i32;
        let entries: Vec<i32> = (1..=n).collect();
        let shards: Vec<i32> = (0..n).map(|i| i % 2).collect();
        let call = "SELECT outcome FROM seckill_gate_write($1, $2, $3, $4, array_fill(1, ARRAY[$5::int]), $6, $7, $8, \
                    array_fill(1, ARRAY[$5::int])) ORDER BY ord";
        let rows = db
            .query(&format!("{prefix}{call}"), &[&sku, &self.refs, &self.generations, &self.users, &n, &self.keys, &entries, &shards])
            .await
            .unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    }
}

/// The writer's SQL, set-based, on one table of entries: written, a reference written before
/// (duplicate), an entry of an earlier generation (stale), and a key that belongs to another
/// reference (conflict). Only the written ones move the stock and the user counts.
#[tokio::test]
async fn the_gate_write_function_records_each_entry_once() {
    let app = spawn_app_with(gate_settings()).await;
    let sku = app.create_sale(sale(100, 2, 5, "redis-gate")).await;
    let db = db().await;
    let generation = generation(&db, &sku).await;
    let write = async |refs: Vec<i64>, generations: Vec<i64>, users: Vec<&'static str>, keys: Vec<Option<&'static str>>| {
        GateEntries { refs, generations, users, keys }.write_with(&db, "", &sku).await
    };

    let first = write(vec![1, 2], vec![generation; 2], vec!["ann", "bob"], vec![Some("k1"), None]).await;
    let second = write(
        vec![2, 3, 4, 5],
        vec![generation, generation.wrapping_add(1), generation, generation],
        vec!["bob", "cat", "dan", "ann"],
        vec![None, None, Some("k1"), Some("k5")],
    )
    .await;

    assert_eq!(first, ["written", "written"]);
    assert_eq!(second, ["duplicate", "stale", "conflict", "written"]);
    let audit = app.audit(&sku).await;
    assert_eq!(audit["sold"], 3, "ann twice and bob once: {audit}");
    let ann: i32 = db.query_one("SELECT bought FROM user_purchases WHERE sku = $1 AND user_id = 'ann'", &[&sku]).await.unwrap().get(0);
    assert_eq!(ann, 2);
    let remaining: i64 = db.query_one("SELECT sum(remaining) FROM shards WHERE sku = $1", &[&sku]).await.unwrap().get(0);
    assert_eq!(remaining, 97);
}

/// How a gate batch told a duplicate entry from a conflict before migration 0019, alone in a
/// function planned as the writer's statements are: the control of the test below.
const DUPLICATE_PROBE_BEFORE_0019: &str = "
    CREATE FUNCTION duplicate_probe_before_0019(p_sku text, p_refs bigint[])
    RETURNS SETOF text LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
    BEGIN
        RETURN QUERY
            SELECT CASE WHEN EXISTS (SELECT 1 FROM orders o WHERE o.sku = p_sku AND o.gate_ref = p_refs[g.n]) THEN 'duplicate'
                        ELSE 'conflict' END
              FROM generate_series(1, coalesce(array_length(p_refs, 1), 0)) AS g(n);
    END
    $$";

/// A gate batch with a redelivered entry probes that entry's reference, whatever the sale holds:
/// a connection whose plans were made while the sale had no orders still reads a handful of
/// buffers for it after the sale has 20 000 orders (migration 0019). Control: the probe as it
/// was, planned the same way on the same connection, reads every reference of the sale (a hashed
/// subplan), so the same bound fails.
#[tokio::test]
async fn a_gate_batch_reads_its_own_references_not_every_order_of_the_sale() {
    let scratch = ScratchApp::start("gate_ref_probe", gate_settings()).await;
    let db = db_at(&scratch.url).await;
    let sku = scratch.app.create_sale(sale(100, 2, 5, "redis-gate")).await;
    let generation = generation(&db, &sku).await;
    db.batch_execute(DUPLICATE_PROBE_BEFORE_0019).await.unwrap();
    db.batch_execute("ANALYZE orders").await.unwrap();
    let probe_before_0019 = "SELECT duplicate_probe_before_0019($1, ARRAY[1001::bigint])";

    // Both plans are made now, on an empty orders table, and kept for the connection.
    let first = GateEntries { refs: vec![1], generations: vec![generation], users: vec!["ann"], keys: vec![Some("first")] };
    assert_eq!(first.write_with(&db, "", &sku).await, ["written"]);
    db.execute(probe_before_0019, &[&sku]).await.unwrap();
    insert_bulk_orders(&db, &sku, 0, ", gate_ref", ", 1000 + g").await;

    // The entry of reference 1001 again, as a writer that died before its acknowledgement leaves it.
    let redelivered = GateEntries { refs: vec![1001], generations: vec![generation], users: vec!["bulk-1"], keys: vec![Some("bulk-1")] };
    assert_eq!(redelivered.write_with(&db, "", &sku).await, ["duplicate"]);
    let batch = buffers_touched(&redelivered.write_with(&db, EXPLAIN, &sku).await);
    let control = buffers_touched(&explain(&db, probe_before_0019, &[&sku]).await);
    drop(db);
    scratch.finish().await;
    let bound = 200;
    assert!(batch < bound, "a batch of one redelivered entry touched {batch} buffers with {BULK_ORDERS} orders in the sale");
    assert!(control >= bound, "control: the probe before 0019 touched only {control} buffers: the bound cannot tell them apart");
}

/// A `seckill` process of its own (the binary), started with a test-only failpoint armed: its
/// first `redis-gate` order aborts it at the failpoint, as `kill -9` would.
struct ArmedInstance {
    child: std::process::Child,
    address: String,
}

impl ArmedInstance {
    /// Starts the binary with `failpoint` armed and the gate's short claim times.
    async fn start(failpoint: &str) -> Self {
        let dir = std::env::temp_dir().join(crate::helpers::unique_sku("armed"));
        std::fs::create_dir_all(&dir).unwrap();
        let address_file = dir.join("address");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
            .env_remove("SECKILL_CONFIG")
            .env("SECKILL_LISTEN", "127.0.0.1:0")
            .env("SECKILL_ADDRESS_FILE", &address_file)
            .env("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("SECKILL_GATE__CLAIM_IDLE_MS", "300")
            .env("SECKILL_GATE__CLAIM_INTERVAL_MS", "100")
            .env("SECKILL_WORKERS", "1")
            .env("SECKILL_FAILPOINT", failpoint)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the seckill binary starts");
        let found = crate::helpers::eventually(async || std::fs::read_to_string(&address_file).is_ok_and(|a| a.ends_with('\n'))).await;
        assert!(found, "the armed instance wrote no address");
        let address = format!("http://{}", std::fs::read_to_string(&address_file).unwrap().trim());
        Self { child, address }
    }

    /// Sends an order; `None` when the process died before answering.
    async fn order(&self, sku: &str, user: &str, key: &str) -> Option<StatusCode> {
        let response = reqwest::Client::new()
            .post(format!("{}/v1/sales/{sku}/orders", self.address))
            .header("Idempotency-Key", key)
            .json(&json!({"user_id": user, "quantity": 1}))
            .send()
            .await;
        response.ok().map(|r| r.status())
    }

    /// Whether the process is stopped (`SIGSTOP`).
    fn stopped(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        stat.rsplit(") ").next().is_some_and(|rest| rest.starts_with('T'))
    }

    /// Resumes a stopped process.
    fn resume(&self) {
        let resumed = std::process::Command::new("kill").arg("-CONT").arg(self.child.id().to_string()).status().unwrap();
        assert!(resumed.success());
    }

    /// Whether the process has exited (reaped).
    fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }
}

impl Drop for ArmedInstance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The process that decided an order dies before answering (the failpoint), and the client
/// retries with the same key on another instance. The replay answers the order only once it is
/// as durable as the mode promises: in the stream (`redis-gate`), so it reaches PostgreSQL, or
/// already in PostgreSQL (`redis-gate-durable`).
#[tokio::test]
async fn a_replay_after_the_deciding_process_died_answers_only_a_durable_order() {
    let a = spawn_app_with(gate_settings()).await;
    for strategy in ["redis-gate", "redis-gate-durable"] {
        let sku = a.create_sale(sale(10, 2, 2, strategy)).await;
        let mut b = ArmedInstance::start("gate-after-decrement").await;

        assert_eq!(b.order(&sku, "phoenix", "dies-1").await, None, "{strategy}: b died at the failpoint");
        assert!(crate::helpers::eventually(async || b.exited()).await, "{strategy}: b exited");
        let (status, body) = buy(&a, &sku, "phoenix", 1, Some("dies-1")).await;
        let in_postgres_when_answered = orders_with_ref(&sku, body["order_id"].as_i64().unwrap_or(-1)).await;

        assert_eq!(status, StatusCode::OK, "{strategy}: {body}");
        if strategy == "redis-gate-durable" {
            assert_eq!(in_postgres_when_answered, 1, "{strategy}: answered 200 before the order was in PostgreSQL");
        }
        wait_drained(&sku).await;
        assert_eq!(orders_with_ref(&sku, body["order_id"].as_i64().unwrap()).await, 1, "{strategy}: the replayed order never landed");
        let audit = a.audit(&sku).await;
        assert_eq!((audit["sold"].as_i64(), audit["consistent"].as_bool()), (Some(1), Some(true)), "{strategy}: {audit}");
    }
}

/// While PostgreSQL does not take the writer's batch (the sale's row is held), a durable order
/// whose deadline passes has an unknown fate (it lands once the row is free): `503 unavailable`,
/// never `busy` ("nothing was done"); and a replay of it says the same rather than `200`. Once
/// the row is free, the replay answers the order, which is in PostgreSQL.
#[tokio::test]
async fn a_durable_order_past_its_deadline_is_unknown_not_busy_and_so_is_its_replay() {
    let app = spawn_app_with(gate_settings()).await;
    let sku = app.create_sale(sale(10, 2, 2, "redis-gate-durable")).await;
    let mut holder = db().await;
    let hold = holder.transaction().await.unwrap();
    hold.execute("SELECT 1 FROM sales WHERE sku = $1 FOR UPDATE", &[&sku]).await.unwrap();

    let first = app.order(&sku, "stuck", 1, Some("stuck-1")).await;
    let replay = app.order(&sku, "stuck", 1, Some("stuck-1")).await;

    assert_error(first, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
    assert_error(replay, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
    hold.rollback().await.unwrap();
    let (status, body) = buy(&app, &sku, "stuck", 1, Some("stuck-1")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(orders_with_ref(&sku, body["order_id"].as_i64().unwrap()).await, 1);
}

/// The gate writers running on `app` itself (the gauge `seckill_gate_writers` counts every
/// instance of the test process).
fn live_writers(app: &TestApp) -> usize {
    app.gate.live_writers()
}

/// A sale's writer is freed when the sale leaves the gate (reset to another strategy), is deleted,
/// or is sold out with nothing pending; one that still sells keeps its writer.
#[tokio::test]
async fn gate_writers_stop_when_their_sale_needs_them_no_more() {
    let app = spawn_app_with(gate_settings()).await;
    let mut skus = Vec::new();
    for i in 0..12 {
        let strategy = if i % 2 == 0 { "redis-gate" } else { "redis-gate-durable" };
        let sku = app.create_sale(sale(if i % 3 == 2 { 1 } else { 10 }, 2, 2, strategy)).await;
        assert_eq!(buy(&app, &sku, "writer-user", 1, None).await.0, StatusCode::CREATED);
        skus.push(sku);
    }
    let selling = app.create_sale(sale(10, 2, 2, "redis-gate")).await;
    assert_eq!(buy(&app, &selling, "writer-user", 1, None).await.0, StatusCode::CREATED);
    // Four of them are sold out by their one order: their writers may have stopped already.
    let running = live_writers(&app);
    assert!(running >= 9, "one writer per sale still selling: {running}");

    for (i, sku) in skus.iter().enumerate() {
        wait_drained(sku).await;
        match i % 3 {
            0 => assert_eq!(app.put_sale(sku, &sale(10, 2, 2, "db-atomic")).await.status(), StatusCode::OK),
            1 => {
                db().await.execute("DELETE FROM sales WHERE sku = $1", &[sku]).await.unwrap();
            }
            _ => {} // sold out by its one order
        }
    }

    let freed = crate::helpers::eventually(async || live_writers(&app) == 1).await;
    assert!(freed, "writers still running: {} (1 expected: the sale still selling)", live_writers(&app));
    assert_eq!(buy(&app, &skus[2], "writer-user-2", 1, None).await.0, StatusCode::CONFLICT, "a sold-out sale stays sold out");
    assert_eq!(buy(&app, &selling, "writer-user-2", 1, None).await.0, StatusCode::CREATED);
    wait_drained(&selling).await;
    assert_eq!(app.audit(&selling).await["sold"], 2, "the selling sale's writer still writes");
}

/// PostgreSQL checks made by durable waiters of every instance in this test process.
async fn durable_polls(app: &TestApp) -> u64 {
    app.metric("seckill_gate_durable_polls_total").await as u64
}

/// A durable order whose entry the other instance's writer commits is answered by that writer's
/// notice, without the waiting instance polling PostgreSQL. To make the other writer take it for
/// sure, the deciding instance's writer is held in a batch (the test holds the row of that batch's
/// buyer) and nothing is claimed (a long claim time).
#[tokio::test]
async fn a_durable_order_written_by_another_instance_is_answered_without_polling() {
    let settings = |name: &str| {
        let mut settings = gate_settings();
        settings.gate.claim_idle = Duration::from_secs(3600);
        settings.instance = crate::helpers::unique_sku(name);
        settings
    };
    let a_settings = settings("gate-a");
    let (a, b) = (spawn_app_with(a_settings.clone()).await, spawn_app_with(settings("gate-b")).await);
    let sku = a.create_sale(sale(10, 2, 2, "redis-gate-durable")).await;
    assert_eq!(buy(&a, &sku, "blocker", 1, None).await.0, StatusCode::CREATED);
    assert_eq!(buy(&b, &sku, "warm-b", 1, None).await.0, StatusCode::CREATED);
    wait_drained(&sku).await;
    let mut holder = db().await;
    let hold = holder.transaction().await.unwrap();
    hold.execute("SELECT 1 FROM user_purchases WHERE sku = $1 AND user_id = 'blocker' FOR UPDATE", &[&sku]).await.unwrap();
    // An entry of the held buyer, with nobody waiting for it: the writer that reads it is stuck.
    let mut conn = redis().await;
    let generation = generation(&db().await, &sku).await;
    let gate_ref: i64 = redis::cmd("INCR").arg(format!("{{seckill:gate:{sku}}}:seq")).query_async(&mut conn).await.unwrap();
    let _: String = redis::cmd("XADD")
        .arg(stream(&sku))
        .arg("*")
        .arg(&["ref", &gate_ref.to_string(), "gen", &generation.to_string(), "user", "blocker", "qty", "1", "key", "", "parts", "0:1"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut stuck = None;
    let held = crate::helpers::eventually(async || {
        type Summary = (i64, Option<String>, Option<String>, Option<Vec<(String, String)>>);
        let (count, _, _, consumers): Summary =
            redis::cmd("XPENDING").arg(stream(&sku)).arg("writers").query_async(&mut conn).await.unwrap();
        stuck = consumers.and_then(|c| c.into_iter().next()).map(|(name, _)| name);
        count == 1
    })
    .await;
    assert!(held, "a writer took the held entry");
    let stuck_app = if stuck.as_deref() == Some(a_settings.instance.as_str()) { &a } else { &b };
    let polls_before = durable_polls(&a).await;

    let (status, body) = buy(stuck_app, &sku, "remote-user", 1, None).await;

    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(orders_with_ref(&sku, body["order_id"].as_i64().unwrap()).await, 1);
    assert_eq!(durable_polls(&a).await, polls_before, "the waiting instance polled PostgreSQL instead of hearing the commit");
    hold.rollback().await.unwrap();
    wait_drained(&sku).await;
}

/// Sells `sku` out through `app`, one unit per new user; the units sold.
async fn sell_out(app: &TestApp, sku: &str, label: &str) -> i64 {
    let mut sold = 0;
    for i in 0.. {
        match buy(app, sku, &format!("{label}-{i}"), 1, None).await {
            (StatusCode::CREATED, _) => sold += 1,
            (StatusCode::CONFLICT, body) if body["error"] == "sold_out" => return sold,
            other => panic!("{other:?}"),
        }
    }
    unreachable!()
}

/// A slow writer is not a dead one: while an acknowledged order waits in the stream (its writer
/// cannot commit: the test holds the sale's row), reconciliation refuses rather than give its
/// units back, however long it waits; once the writer commits, the sale sells exactly its stock.
/// The control repairs Redis from PostgreSQL without that refusal (what reconciliation did to an
/// order older than the claim time before the decision and the enqueue became one script): the
/// units are sold twice.
#[tokio::test]
async fn reconciliation_never_gives_back_the_units_of_a_queued_order() {
    for control in [false, true] {
        let app = spawn_app_with(gate_settings()).await;
        let sku = app.create_sale(sale(4, 2, 2, "redis-gate")).await;
        let mut holder = db().await;
        let hold = holder.transaction().await.unwrap();
        hold.execute("SELECT 1 FROM sales WHERE sku = $1 FOR UPDATE", &[&sku]).await.unwrap();
        assert_eq!(buy(&app, &sku, "slow-writer", 1, None).await.0, StatusCode::CREATED);

        if control {
            // Redis set to PostgreSQL's truth (no order yet): the queued order's unit comes back.
            let _: () = redis::pipe()
                .cmd("HSET")
                .arg(format!("{{seckill:gate:{sku}}}:stock"))
                .arg(0)
                .arg(2)
                .arg(1)
                .arg(2)
                .cmd("HSET")
                .arg(format!("{{seckill:gate:{sku}}}:meta"))
                .arg("left")
                .arg(4)
                .query_async(&mut redis().await)
                .await
                .unwrap();
        } else {
            assert_error(reconcile(&app, &sku, "").await, StatusCode::CONFLICT, "queue_not_drained").await;
        }
        hold.rollback().await.unwrap();
        wait_drained(&sku).await;
        let sold = 1 + sell_out(&app, &sku, "after").await;
        wait_drained(&sku).await;

        let audit = app.audit(&sku).await;
        if control {
            assert_eq!((sold, audit["oversold"].as_i64()), (5, Some(1)), "control: the given-back unit sold twice: {audit}");
        } else {
            assert_eq!((sold, audit["sold"].as_i64(), audit["oversold"].as_i64()), (4, Some(4), Some(0)), "{audit}");
        }
    }
}

/// A process paused right after it decided an order (the failpoint) while the rest of the
/// deployment carries on: reconciliation runs, the sale sells out. When it resumes, its client
/// gets its order and nothing is sold twice: the order was in the stream from the first moment,
/// so the paused process holds nothing that could write it late.
#[tokio::test]
async fn a_process_paused_after_deciding_sells_nothing_twice() {
    let a = spawn_app_with(gate_settings()).await;
    let sku = a.create_sale(sale(4, 2, 2, "redis-gate")).await;
    let b = std::sync::Arc::new(ArmedInstance::start("gate-pause-after-decrement").await);
    let paused = tokio::spawn({
        let (b, sku) = (b.clone(), sku.clone());
        async move { b.order(&sku, "paused-user", "paused-1").await }
    });
    assert!(crate::helpers::eventually(async || b.stopped()).await, "b stopped at the failpoint");

    let report = reconcile(&a, &sku, "?drain=1").await;
    assert_eq!(report.status(), StatusCode::OK);
    let report: Value = report.json().await.unwrap();
    let sold_meanwhile = sell_out(&a, &sku, "meanwhile").await;
    b.resume();

    assert_eq!(paused.await.unwrap(), Some(StatusCode::CREATED), "the paused order is answered once resumed");
    assert_eq!((report["undersold"].as_i64(), sold_meanwhile), (Some(0), 3), "{report}");
    wait_drained(&sku).await;
    let audit = a.audit(&sku).await;
    assert_eq!(
        (audit["sold"].as_i64(), audit["oversold"].as_i64(), audit["consistent"].as_bool()),
        (Some(4), Some(0), Some(true)),
        "{audit}"
    );
}
