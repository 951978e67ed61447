//! `spawn_app()`: a real service instance on a random port, and typed request helpers.

use std::sync::Arc;

use actix_web::dev::ServerHandle;
use reqwest::{Response, StatusCode};
use seckill::{config::Settings, lab::gate::Gate, owned::OwnedShards, startup::Application};
use serde_json::{Value, json};

pub(crate) const ADMIN_TOKEN: &str = "test-admin-token";

pub(crate) struct TestApp {
    pub(crate) address: String,
    pub(crate) http: reqwest::Client,
    /// This instance's owned shards and gate: the metrics are the process's, summed or last set
    /// over every instance a test binary runs.
    pub(crate) owned: Arc<OwnedShards>,
    pub(crate) gate: Arc<Gate>,
    handle: ServerHandle,
}

/// Settings from the environment (`REDIS_URL`, `DATABASE_URL`), on a random port.
pub(crate) fn test_settings() -> Settings {
    let mut settings = Settings::load().expect("valid test environment");
    settings.listen = "127.0.0.1:0".parse().unwrap();
    settings.admin_token = seckill::config::Secret::new(ADMIN_TOKEN);
    settings.workers = 2;
    settings.pools.general = 8;
    settings.pools.critical = 8;
    settings
}

pub(crate) async fn spawn_app() -> TestApp {
    spawn_app_with(test_settings()).await
}

pub(crate) async fn spawn_app_with(settings: Settings) -> TestApp {
    if std::env::var_os("TEST_LOG").is_some() {
        seckill::telemetry::init_tracing();
    }
    let app = Application::build(&settings).await.expect("the service starts against `make services`");
    let address = format!("http://127.0.0.1:{}", app.port());
    let handle = app.handle();
    let (owned, gate) = (app.owned(), app.gate());
    tokio::spawn(app.run_until_stopped());
    TestApp { address, http: reqwest::Client::new(), owned, gate, handle }
}

/// A SKU no other test uses.
pub(crate) fn unique_sku(label: &str) -> String {
    format!("{label}-{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff)
}

pub(crate) fn sale_body(total: u32, shards: u32, strategy: &str) -> Value {
    json!({"total": total, "shards": shards, "per_user_limit": 2, "max_per_order": 2, "strategy": strategy})
}

impl TestApp {
    pub(crate) async fn put_sale(&self, sku: &str, body: &Value) -> Response {
        self.http.put(format!("{}/v1/sales/{sku}", self.address)).bearer_auth(ADMIN_TOKEN).json(body).send().await.unwrap()
    }

    /// Creates a fresh sale and returns its SKU.
    pub(crate) async fn create_sale(&self, body: Value) -> String {
        let sku = unique_sku("sale");
        let response = self.put_sale(&sku, &body).await;
        assert_eq!(response.status(), StatusCode::OK, "{}", response.text().await.unwrap());
        sku
    }

    pub(crate) async fn order(&self, sku: &str, user: &str, quantity: i64, key: Option<&str>) -> Response {
        let mut request =
            self.http.post(format!("{}/v1/sales/{sku}/orders", self.address)).json(&json!({"user_id": user, "quantity": quantity}));
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send().await.unwrap()
    }

    pub(crate) async fn get_json(&self, path: &str) -> (StatusCode, Value) {
        let response = self.http.get(format!("{}{path}", self.address)).send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub(crate) async fn audit(&self, sku: &str) -> Value {
        let (status, body) = self.get_json(&format!("/v1/sales/{sku}/audit")).await;
        assert_eq!(status, StatusCode::OK);
        body
    }

    /// The sum of every series of the metric `name` this instance exports (0 if none).
    pub(crate) async fn metric(&self, name: &str) -> f64 {
        let text = self.http.get(format!("{}/metrics", self.address)).send().await.unwrap().text().await.unwrap();
        text.lines()
            .filter(|line| line.strip_prefix(name).is_some_and(|rest| rest.starts_with([' ', '{'])))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub(crate) async fn stop(&self) {
        self.handle.stop(true).await;
    }
}

/// Asserts an error response's status and code.
pub(crate) async fn assert_error(response: Response, status: StatusCode, code: &str) -> Value {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.expect("errors have a JSON body");
    assert_eq!(body["error"], code, "{body}");
    assert!(body["message"].is_string());
    body
}

/// Polls `check` every 20 ms for up to 10 s; true as soon as it holds.
pub(crate) async fn eventually(mut check: impl AsyncFnMut() -> bool) -> bool {
    for _ in 0..500 {
        if check().await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    false
}

/// A direct PostgreSQL connection, for what only the database can tell.
pub(crate) async fn db() -> tokio_postgres::Client {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://seckill@127.0.0.1:5440/seckill".into());
    db_at(&url).await
}

/// A direct PostgreSQL connection to the database at `url` (a scratch one).
pub(crate) async fn db_at(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// A database of its own for a test that locks whole tables, so no other test waits on it, or that
/// needs plans made while the tables are empty; its URL and name. Made afresh (one that a failed
/// run left behind is dropped first), and dropped by [`drop_scratch_database`].
pub(crate) async fn scratch_database(label: &str) -> (String, String) {
    let name = format!("seckill_scratch_{label}");
    let admin = db().await;
    admin.execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"), &[]).await.unwrap();
    admin.execute(&format!("CREATE DATABASE {name}"), &[]).await.unwrap();
    let base = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://seckill@127.0.0.1:5440/seckill".into());
    let (server, _) = base.rsplit_once('/').expect("DATABASE_URL ends in a database name");
    (format!("{server}/{name}"), name)
}

/// Drops a database made by [`scratch_database`], closing whatever is still connected to it.
pub(crate) async fn drop_scratch_database(name: &str) {
    db().await.execute(&format!("DROP DATABASE {name} WITH (FORCE)"), &[]).await.unwrap();
}

/// An app serving a [`scratch_database`] of the test's own.
pub(crate) struct ScratchApp {
    pub(crate) app: TestApp,
    /// The database's URL.
    pub(crate) url: String,
    name: String,
}

impl ScratchApp {
    /// Makes the database `seckill_scratch_{label}` and starts an app on it with `settings`.
    pub(crate) async fn start(label: &str, mut settings: Settings) -> Self {
        let (url, name) = scratch_database(label).await;
        settings.database_url = seckill::config::Secret::new(url.clone());
        Self { app: spawn_app_with(settings).await, url, name }
    }

    /// Stops the app and drops its database.
    pub(crate) async fn finish(self) {
        self.app.stop().await;
        drop_scratch_database(&self.name).await;
    }
}

/// Orders a test bulk-inserts into a sale to show that a plan reads only the rows it needs:
/// enough that reading every order of the sale costs hundreds or thousands of buffers, where a
/// probe costs a few.
pub(crate) const BULK_ORDERS: i32 = 20_000;

/// Inserts [`BULK_ORDERS`] orders of one unit into the sale `sku` on `db`, from shard 0 under
/// `fence`, users and keys `bulk-1`, `bulk-2`, ...; `columns` names more columns (each with a
/// leading comma) and `values` their values, SQL over `g`, the order's number.
pub(crate) async fn insert_bulk_orders(db: &tokio_postgres::Client, sku: &str, fence: i64, columns: &str, values: &str) {
    let insert = format!(
        "INSERT INTO orders (sku, user_id, quantity, shard, fence, idempotency_key{columns}) \
         SELECT $1, 'bulk-' || g, 1, 0, $2, 'bulk-' || g{values} FROM generate_series(1, $3) AS g"
    );
    db.execute(&insert, &[&sku, &fence, &BULK_ORDERS]).await.unwrap();
}

/// The generation of the sale `sku`, read from `db`.
pub(crate) async fn generation(db: &tokio_postgres::Client, sku: &str) -> i64 {
    db.query_one("SELECT generation FROM sales WHERE sku = $1", &[&sku]).await.unwrap().get(0)
}

/// What turns a statement into its plan with the buffers it touched (it still runs).
pub(crate) const EXPLAIN: &str = "EXPLAIN (ANALYZE, BUFFERS) ";

/// The lines of [`EXPLAIN`] of `query` on `db`, which runs it.
pub(crate) async fn explain(
    db: &tokio_postgres::Client,
    query: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Vec<String> {
    db.query(&format!("{EXPLAIN}{query}"), params).await.unwrap().iter().map(|r| r.get(0)).collect()
}

/// Shared buffers (hit + read) of the top node of `plan` (EXPLAIN's text lines): what one call
/// touched, the statements a function ran included.
pub(crate) fn buffers_touched(plan: &[String]) -> u64 {
    let line = plan.iter().find(|l| l.trim_start().starts_with("Buffers: shared")).expect("EXPLAIN (BUFFERS) names the shared buffers");
    ["hit=", "read="]
        .iter()
        .filter_map(|kind| line.split(kind).nth(1))
        .map(|n| n.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse::<u64>().unwrap())
        .sum()
}
