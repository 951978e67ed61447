//! Shared test helpers: the Redis URL, clients, unique lock names, a raw connection.

use std::time::Duration;

use lockkit::LockClient;
use redis::aio::MultiplexedConnection;

pub(crate) fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into())
}

/// A lock name no other test (or earlier run) uses.
pub(crate) fn unique(name: &str) -> String {
    format!("test:{name}:{:016x}", rand::random::<u64>())
}

pub(crate) async fn client() -> LockClient {
    LockClient::connect(&redis_url()).await.expect("redis from `make services` must be running")
}

/// A client whose watchdog renews a short default lease.
pub(crate) async fn client_with_lease(lease: Duration) -> LockClient {
    LockClient::builder(redis_url()).default_lease(lease).connect().await.unwrap()
}

/// A plain connection, standing in for "another client" or an operator.
pub(crate) async fn raw() -> MultiplexedConnection {
    redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}

pub(crate) fn lock_key(name: &str) -> String {
    format!("{{lockkit:{name}}}")
}

/// Polls `check` every 10 ms for up to `within`; true as soon as it holds.
pub(crate) async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) async fn exists(conn: &mut MultiplexedConnection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query_async::<bool>(conn).await.unwrap()
}
