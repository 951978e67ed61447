//! Work under a lock (`LockGuard::run`, `LockClient::with_lock`) on every backend: work that
//! outlives a lease whose renewals are cut is stopped, and the control (the same work spawned
//! beside a plain guard) runs on after the loss; work that finishes, or fails, releases the lock.
//! The three behaviours are written once and instantiated per backend by `on_backend!`.
//!
//! Renewals are cut where only this test's clients feel it: through a [`Proxy`] that stalls
//! (one Redis, ZooKeeper, etcd, PostgreSQL: shared servers), or with `CLIENT PAUSE` on the
//! servers a test owns (Redlock's masters, the Cluster's nodes: a cluster client learns the
//! nodes' own addresses, so a proxy would be bypassed).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use lockkit::LockClient;

use crate::{
    servers::{Cluster, Masters, RedisServer},
    support::{Proxy, eventually, exists, lock_key, raw, redis_url, unique},
};

/// Every test ends or fails within this (it never waits for it to pass).
const TEST_BOUND: Duration = Duration::from_secs(90);

/// A backend as a test sees it: where its clients connect, with which lease, and how the test
/// cuts their renewals.
struct Backend {
    url: String,
    lease: Duration,
    cut: Cut,
}

/// How a test cuts renewals; it also keeps alive what the cut needs until the test ends.
enum Cut {
    /// Stall the proxy that the clients go through.
    Stall(Proxy),
    /// `CLIENT PAUSE` the servers, which the test owns (they are killed when it ends).
    Pause(Vec<RedisServer>),
}

impl Backend {
    async fn client(&self) -> LockClient {
        LockClient::builder(&self.url).default_lease(self.lease).connect().await.unwrap()
    }

    /// From now on, nothing the clients send is answered. (`::redis`: the module `redis` below
    /// shadows the crate here.)
    async fn cut(&self) {
        match &self.cut {
            Cut::Stall(proxy) => proxy.stall(),
            Cut::Pause(servers) => {
                for server in servers {
                    let mut conn = server.conn().await;
                    let _: () = ::redis::cmd("CLIENT")
                        .arg("PAUSE")
                        .arg(600_000)
                        .arg("ALL")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                }
            }
        }
    }
}

/// Work that never ends by itself: it counts a tick every few milliseconds.
async fn ticking(ticks: Arc<AtomicU64>) {
    loop {
        ticks.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether `ticks` still moves: it grows within half a second (a hundred ticks).
async fn still_ticking(ticks: &AtomicU64) -> bool {
    let before = ticks.load(Ordering::SeqCst);
    eventually(Duration::from_millis(500), || std::future::ready(ticks.load(Ordering::SeqCst) > before)).await
}

async fn started(ticks: &AtomicU64) {
    assert!(eventually(TEST_BOUND, || std::future::ready(ticks.load(Ordering::SeqCst) > 0)).await, "the work runs");
}

/// Runs ticking work under a lock with `LockGuard::run` and cuts the renewals: the run ends
/// with the loss, and the work no longer ticks.
async fn run_stops_the_work_when_renewals_are_cut(backend: Backend) {
    let client = backend.client().await;
    let guard = client.try_lock(&unique("run-cut")).await.unwrap().expect("free");
    let ticks = Arc::new(AtomicU64::new(0));
    let run = tokio::spawn(guard.run(ticking(ticks.clone())));
    started(&ticks).await;

    backend.cut().await;
    let err = run.await.unwrap().expect_err("the work never ends by itself: only the loss ends the run");

    assert!(err.is_lost(), "{err}");
    assert!(err.lease_loss().is_some(), "the error carries the cause: {err}");
    assert!(!still_ticking(&ticks).await, "the work was dropped with the lease");
}

/// The control: the same work spawned beside a plain guard. The lease is lost just the same, and
/// the work runs on: nothing but `run` stops it.
async fn control_spawned_work_runs_on_after_the_loss(backend: Backend) {
    let client = backend.client().await;
    let guard = client.try_lock(&unique("run-control")).await.unwrap().expect("free");
    let ticks = Arc::new(AtomicU64::new(0));
    let work = tokio::spawn(ticking(ticks.clone()));
    started(&ticks).await;

    backend.cut().await;
    guard.lost().await;

    assert!(still_ticking(&ticks).await, "without run, the work goes on without the lock");
    work.abort();
}

/// Work that finishes, and work that fails with its own error, both leave the lock free for the
/// next holder (another client) at once, and hand their output back untouched.
async fn finished_and_failed_work_release_the_lock(backend: Backend) {
    let (client, other) = (backend.client().await, backend.client().await);
    let name = unique("run-release");
    let wait = Duration::from_secs(10);

    let fence = client.with_lock(&name, wait, |fence| async move { fence }).await.unwrap();
    let next = other.try_lock(&name).await.unwrap().expect("released after the work finished");
    assert!(next.fence() > fence);
    next.release().await.unwrap();

    let failed = client.with_lock(&name, wait, |_| async { Err::<(), _>("the work's own error") }).await;
    assert_eq!(failed.unwrap(), Err("the work's own error"), "the work's error comes back as it was");
    let next = other.try_lock(&name).await.unwrap().expect("released after the work failed");
    next.release().await.unwrap();
    assert_eq!(client.held_leases(), 0);
}

/// The three tests above, in a module named after the backend that `$backend` (an expression
/// giving a `Backend`) sets up.
macro_rules! on_backend {
    ($(#[$attr:meta])* $module:ident, $backend:expr) => {
        $(#[$attr])*
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn run_stops_the_work_when_renewals_are_cut() {
                tokio::time::timeout(TEST_BOUND, super::run_stops_the_work_when_renewals_are_cut($backend.await))
                    .await
                    .expect("bounded");
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn control_spawned_work_runs_on_after_the_loss() {
                tokio::time::timeout(TEST_BOUND, super::control_spawned_work_runs_on_after_the_loss($backend.await))
                    .await
                    .expect("bounded");
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn finished_and_failed_work_release_the_lock() {
                tokio::time::timeout(TEST_BOUND, super::finished_and_failed_work_release_the_lock($backend.await))
                    .await
                    .expect("bounded");
            }
        }
    };
}

/// A backend whose clients reach `upstream` (`host:port`) through a proxy; `url_of` makes their
/// URL from the proxy's address.
async fn through_proxy(upstream: String, lease: Duration, url_of: impl FnOnce(&str) -> String) -> Backend {
    let proxy = Proxy::start_to(upstream).await;
    Backend { url: url_of(&proxy.address()), lease, cut: Cut::Stall(proxy) }
}

/// `host:port` of a URL with one host (`scheme://[user@]host:port[/rest]`).
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").expect("a URL").1;
    rest.split('/').next().unwrap().rsplit('@').next().unwrap().to_owned()
}

async fn redis() -> Backend {
    through_proxy(host_port(&redis_url()), Duration::from_millis(600), |proxy| format!("redis://{proxy}")).await
}

async fn redlock() -> Backend {
    let masters = Masters::start(3).await;
    Backend { url: masters.url(), lease: Duration::from_secs(1), cut: Cut::Pause(masters.nodes) }
}

async fn cluster() -> Backend {
    let cluster = Cluster::start().await;
    Backend { url: cluster.url(), lease: Duration::from_secs(1), cut: Cut::Pause(cluster.nodes) }
}

/// The lease is the session timeout; not shorter, or a busy shared server may end the session
/// before the test cuts anything.
#[cfg(feature = "zookeeper")]
async fn zookeeper() -> Backend {
    let (hosts, chroot) = crate::zookeeper_server::split_url(&crate::zookeeper_server::zookeeper_url());
    through_proxy(hosts, Duration::from_secs(4), |proxy| format!("zk://{proxy}{chroot}")).await
}

#[cfg(feature = "etcd")]
async fn etcd() -> Backend {
    let url = crate::etcd_server::etcd_url();
    through_proxy(host_port(&url), Duration::from_secs(2), |proxy| format!("etcd://{proxy}")).await
}

/// The shared PostgreSQL with `scheme` (`postgres` or `postgres+advisory`).
#[cfg(feature = "postgres")]
async fn postgres(scheme: &str) -> Backend {
    let base = crate::postgres_server::database_url();
    let upstream = host_port(&base);
    through_proxy(upstream.clone(), Duration::from_millis(1500), |proxy| {
        base.replacen(&upstream, proxy, 1).replacen("postgres://", &format!("{scheme}://"), 1)
    })
    .await
}

on_backend!(redis, super::redis());
on_backend!(redlock, super::redlock());
on_backend!(cluster, super::cluster());
on_backend!(
    #[cfg(feature = "zookeeper")]
    zookeeper,
    super::zookeeper()
);
on_backend!(
    #[cfg(feature = "etcd")]
    etcd,
    super::etcd()
);
on_backend!(
    #[cfg(feature = "postgres")]
    postgres,
    super::postgres("postgres")
);
on_backend!(
    #[cfg(feature = "postgres")]
    postgres_advisory,
    super::postgres("postgres+advisory")
);

/// On one Redis the lock key itself is gone once `with_lock` returns, error or not.
#[tokio::test]
async fn redis_with_lock_deletes_the_key_before_it_returns() {
    let client = LockClient::connect(&redis_url()).await.unwrap();
    let mut conn = raw().await;
    let name = unique("run-key");

    let held = client
        .with_lock(&name, Duration::from_secs(2), |_| async { exists(&mut raw().await, &lock_key(&name)).await })
        .await
        .unwrap();
    let failed = client.with_lock(&name, Duration::from_secs(2), |_| async { Err::<(), _>(()) }).await.unwrap();

    assert!(held, "the key existed while the work ran");
    assert_eq!(failed, Err(()));
    assert!(!exists(&mut conn, &lock_key(&name)).await, "gone after the work");
}

/// The control for the release checks: the same work awaited beside a plain guard, which is kept
/// until the end of the test, leaves the lock held, and the same checks see it.
#[tokio::test]
async fn redis_control_work_beside_a_kept_guard_leaves_the_lock_held() {
    let client = LockClient::connect(&redis_url()).await.unwrap();
    let mut conn = raw().await;
    let name = unique("run-kept");

    let guard = client.lock(&name, Duration::from_secs(2)).await.unwrap();
    let failed = async { Err::<(), _>("the work's own error") }.await;

    assert!(failed.is_err());
    assert!(client.try_lock(&name).await.unwrap().is_none(), "still held: the checks above would fail");
    assert!(exists(&mut conn, &lock_key(&name)).await);
    guard.release().await.unwrap();
}
