//! A Redis that may evict lock keys is refused at connect, on one Redis, a cluster and Redlock,
//! unless the user opts out; each test starts its own servers (ports 6400-6499) with the policy.

use std::{
    io::Write,
    sync::{Arc, Mutex},
};

use lockkit::{ErrorKind, LockClient};

use crate::{
    servers::{Cluster, RedisServer},
    support::unique,
};

const ALLKEYS: [&str; 2] = ["--maxmemory-policy", "allkeys-lru"];

/// The refusal names the policy, what it can do to locks, and the way out.
fn assert_refused(err: &lockkit::Error, policy: &str) {
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    let message = err.to_string();
    assert!(
        message.contains(policy) && message.contains("noeviction") && message.contains("allow_eviction"),
        "{message}"
    );
}

/// The client works: a lock is granted and released.
async fn assert_locks(client: &LockClient) {
    let guard = client.try_lock(&unique("eviction")).await.unwrap().expect("free");
    assert!(guard.release().await.unwrap());
}

#[tokio::test]
async fn one_redis_under_allkeys_lru_is_refused() {
    let server = RedisServer::start_64xx(&ALLKEYS).await;

    let err = LockClient::connect(&server.url()).await.unwrap_err();

    assert_refused(&err, "allkeys-lru");
    assert!(err.to_string().contains("fence"), "allkeys-* evicts fence counters: {err}");
}

#[tokio::test]
async fn one_redis_under_volatile_lru_is_refused() {
    let server = RedisServer::start_64xx(&["--maxmemory-policy", "volatile-lru"]).await;

    let err = LockClient::connect(&server.url()).await.unwrap_err();

    assert_refused(&err, "volatile-lru");
    assert!(err.to_string().contains("held locks"), "volatile-* evicts held locks: {err}");
}

/// Control: the same server with the opt-out, by the builder or by the URL, connects.
#[tokio::test]
async fn control_one_redis_under_allkeys_lru_connects_when_the_user_opts_out() {
    let server = RedisServer::start_64xx(&ALLKEYS).await;

    let by_builder = LockClient::builder(server.url()).allow_eviction(true).connect().await.unwrap();
    let by_url = LockClient::connect(&format!("{}/0?allow_eviction=true", server.url())).await.unwrap();

    assert_locks(&by_builder).await;
    assert_locks(&by_url).await;
}

/// A user whose ACL forbids `CONFIG` connects, and a warning says the policy was not read.
#[tokio::test(flavor = "current_thread")]
async fn a_server_that_will_not_tell_its_policy_is_let_through_with_a_warning() {
    let server = RedisServer::start_64xx(&ALLKEYS).await;
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "on", ">secret", "~*", "&*", "+@all", "-config"][..])
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    let (logs, _capture) = Logs::capture();

    let client = LockClient::connect(&format!("redis://locker:secret@{}", server.address())).await.unwrap();

    assert_locks(&client).await;
    logs.assert_policy_not_read();
}

/// The same when `CONFIG` was renamed away, as some hosted Redis services do.
#[tokio::test(flavor = "current_thread")]
async fn a_server_with_config_renamed_away_is_let_through_with_a_warning() {
    let server =
        RedisServer::start_64xx(&["--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", ""]).await;
    let (logs, _capture) = Logs::capture();

    let client = LockClient::connect(&server.url()).await.unwrap();

    assert_locks(&client).await;
    logs.assert_policy_not_read();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_under_allkeys_lru_is_refused_unless_the_user_opts_out() {
    let cluster = Cluster::start_64xx(&ALLKEYS).await;

    let err = LockClient::connect(&cluster.url()).await.unwrap_err();
    let opted_out = LockClient::builder(cluster.url()).allow_eviction(true).connect().await.unwrap();

    assert_refused(&err, "allkeys-lru");
    assert_locks(&opted_out).await;
}

/// One evicting node is enough to refuse: any majority may include it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_with_one_node_under_allkeys_lru_is_refused_unless_the_user_opts_out() {
    let nodes = [
        RedisServer::start_64xx(&[]).await,
        RedisServer::start_64xx(&[]).await,
        RedisServer::start_64xx(&ALLKEYS).await,
    ];
    let url = format!("redlock://{}", nodes.iter().map(RedisServer::address).collect::<Vec<_>>().join(","));

    let err = LockClient::connect(&url).await.unwrap_err();
    let opted_out = LockClient::connect(&format!("{url}?allow_eviction=true")).await.unwrap();

    assert_refused(&err, "allkeys-lru");
    assert!(err.to_string().contains(&nodes[2].address()), "names the node: {err}");
    assert_locks(&opted_out).await;
}

/// Control: servers under `noeviction` (Redis' default) connect without any opt-out.
#[tokio::test]
async fn control_noeviction_connects() {
    let server = RedisServer::start_64xx(&["--maxmemory-policy", "noeviction"]).await;

    assert_locks(&LockClient::connect(&server.url()).await.unwrap()).await;
}

/// What the tracing subscriber of a test wrote.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Captures the warnings of this thread (a current-thread test) until the guard is dropped.
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Self::default();
        let subscriber =
            tracing_subscriber::fmt().with_writer(logs.clone()).with_max_level(tracing::Level::WARN).finish();
        (logs.clone(), tracing::subscriber::set_default(subscriber))
    }

    fn assert_policy_not_read(&self) {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        assert!(text.contains("cannot read maxmemory-policy") && text.contains("noeviction"), "{text}");
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
