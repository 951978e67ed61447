//! Work under a lock (`LockGuard::run`, `LockClient::with_lock`) on every backend: work that
//! outlives a lease whose renewals are cut is stopped, and the control (the same work spawned
//! beside a plain guard) runs on after the loss; work that finishes, or fails, releases the lock.
//!
//! Renewals are cut where only this test's clients feel it: through a [`Proxy`] that stalls
//! (one Redis, ZooKeeper, etcd, PostgreSQL, all shared servers), or with `CLIENT PAUSE` on the
//! servers a test owns (Redlock's masters, the Cluster's nodes: a cluster client learns the
//! nodes' own addresses, so a proxy would be bypassed).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use lockkit::{LockClient, LockClientBuilder};

use crate::{
    servers::{Cluster, Masters, RedisServer},
    support::{Proxy, eventually, exists, lock_key, raw, redis_url, unique},
};

/// Every test ends or fails within this (it never waits for it to pass).
const TEST_BOUND: Duration = Duration::from_secs(90);

/// Work that never ends by itself: it counts a tick every few milliseconds.
async fn ticking(ticks: Arc<AtomicU64>) {
    loop {
        ticks.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether `ticks` still moves: it grows within a few hundred ticks' time.
async fn still_ticking(ticks: &AtomicU64) -> bool {
    let before = ticks.load(Ordering::SeqCst);
    eventually(Duration::from_millis(500), || std::future::ready(ticks.load(Ordering::SeqCst) > before)).await
}

async fn started(ticks: &AtomicU64) {
    assert!(eventually(TEST_BOUND, || std::future::ready(ticks.load(Ordering::SeqCst) > 0)).await, "the work runs");
}

/// Takes a lock through `client`, runs ticking work under it with `LockGuard::run`, cuts the
/// renewals with `cut`: the run ends with the loss, and the work no longer ticks.
async fn run_stops_the_work_when_renewals_are_cut(client: LockClient, cut: impl AsyncFnOnce()) {
    tokio::time::timeout(TEST_BOUND, async {
        let guard = client.try_lock(&unique("run-cut")).await.unwrap().expect("free");
        let ticks = Arc::new(AtomicU64::new(0));
        let run = tokio::spawn(guard.run(ticking(ticks.clone())));
        started(&ticks).await;

        cut().await;
        let err = run.await.unwrap().expect_err("the work never ends by itself: only the loss ends the run");

        assert!(err.is_lost(), "{err}");
        assert!(err.lease_loss().is_some(), "the error carries the cause: {err}");
        assert!(!still_ticking(&ticks).await, "the work was dropped with the lease");
    })
    .await
    .expect("bounded");
}

/// The control: the same work spawned beside a plain guard. The lease is lost just the same, and
/// the work runs on: nothing but `run` stops it.
async fn control_spawned_work_runs_on_after_the_loss(client: LockClient, cut: impl AsyncFnOnce()) {
    tokio::time::timeout(TEST_BOUND, async {
        let guard = client.try_lock(&unique("run-control")).await.unwrap().expect("free");
        let ticks = Arc::new(AtomicU64::new(0));
        let work = tokio::spawn(ticking(ticks.clone()));
        started(&ticks).await;

        cut().await;
        guard.lost().await;

        assert!(still_ticking(&ticks).await, "without run, the work goes on without the lock");
        work.abort();
    })
    .await
    .expect("bounded");
}

/// Work that finishes, and work that fails with its own error, both leave the lock free for the
/// next holder (`other`, another client) at once, and hand their output back untouched.
async fn finished_and_failed_work_release_the_lock(client: LockClient, other: LockClient) {
    tokio::time::timeout(TEST_BOUND, async {
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
    })
    .await
    .expect("bounded");
}

// --- one Redis ---

/// A client of the shared Redis through `proxy`, with a short lease.
async fn redis_through(proxy: &Proxy) -> LockClient {
    LockClient::builder(proxy.url()).default_lease(Duration::from_millis(600)).connect().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_run_stops_the_work_when_renewals_are_cut() {
    let proxy = Proxy::start().await;
    run_stops_the_work_when_renewals_are_cut(redis_through(&proxy).await, async || proxy.stall()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_control_spawned_work_runs_on_after_the_loss() {
    let proxy = Proxy::start().await;
    control_spawned_work_runs_on_after_the_loss(redis_through(&proxy).await, async || proxy.stall()).await;
}

#[tokio::test]
async fn redis_finished_and_failed_work_release_the_lock() {
    let client = LockClient::connect(&redis_url()).await.unwrap();
    finished_and_failed_work_release_the_lock(client.clone(), client).await;
}

/// The lock key itself is gone once `with_lock` returns, error or not.
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
/// until the end of the test, leaves the lock held, and the same check sees it.
#[tokio::test]
async fn redis_control_work_beside_a_kept_guard_leaves_the_lock_held() {
    let client = LockClient::connect(&redis_url()).await.unwrap();
    let mut conn = raw().await;
    let name = unique("run-kept");

    let guard = client.lock(&name, Duration::from_secs(2)).await.unwrap();
    let failed = async { Err::<(), _>("the work's own error") }.await;

    assert!(failed.is_err());
    assert!(client.try_lock(&name).await.unwrap().is_none(), "still held: the check above would fail");
    assert!(exists(&mut conn, &lock_key(&name)).await);
    guard.release().await.unwrap();
}

// --- Redlock and Redis Cluster, on servers the test owns ---

/// `CLIENT PAUSE` on every server: nothing they are sent is answered for a minute.
async fn pause(servers: &[RedisServer]) {
    for server in servers {
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(60_000)
            .arg("ALL")
            .query_async(&mut server.conn().await)
            .await
            .unwrap();
    }
}

async fn short_lease(builder: LockClientBuilder) -> LockClient {
    builder.default_lease(Duration::from_secs(1)).connect().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_run_stops_the_work_when_renewals_are_cut() {
    let masters = Masters::start(3).await;
    let client = short_lease(LockClient::builder(masters.url())).await;
    run_stops_the_work_when_renewals_are_cut(client, async || pause(&masters.nodes).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_control_spawned_work_runs_on_after_the_loss() {
    let masters = Masters::start(3).await;
    let client = short_lease(LockClient::builder(masters.url())).await;
    control_spawned_work_runs_on_after_the_loss(client, async || pause(&masters.nodes).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_finished_and_failed_work_release_the_lock() {
    let masters = Masters::start(3).await;
    let (a, b) =
        (LockClient::connect(&masters.url()).await.unwrap(), LockClient::connect(&masters.url()).await.unwrap());
    finished_and_failed_work_release_the_lock(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_run_stops_the_work_when_renewals_are_cut() {
    let cluster = Cluster::start().await;
    let client = short_lease(LockClient::builder(cluster.url())).await;
    run_stops_the_work_when_renewals_are_cut(client, async || pause(&cluster.nodes).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_control_spawned_work_runs_on_after_the_loss() {
    let cluster = Cluster::start().await;
    let client = short_lease(LockClient::builder(cluster.url())).await;
    control_spawned_work_runs_on_after_the_loss(client, async || pause(&cluster.nodes).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_finished_and_failed_work_release_the_lock() {
    let cluster = Cluster::start().await;
    let (a, b) =
        (LockClient::connect(&cluster.url()).await.unwrap(), LockClient::connect(&cluster.url()).await.unwrap());
    finished_and_failed_work_release_the_lock(a, b).await;
}

// --- ZooKeeper ---

#[cfg(feature = "zookeeper")]
mod zookeeper {
    use super::*;
    use crate::zookeeper_server::{split_url, zookeeper_url};

    /// A client of the shared ZooKeeper through `proxy`. The lease is the session timeout; not
    /// shorter, or a busy shared server may end the session before the test cuts anything.
    async fn client_through(proxy: &Proxy) -> LockClient {
        let (_, chroot) = split_url(&zookeeper_url());
        let url = format!("zk://{}{chroot}", proxy.address());
        LockClient::builder(url).default_lease(Duration::from_secs(4)).connect().await.unwrap()
    }

    async fn proxy() -> Proxy {
        Proxy::start_to(split_url(&zookeeper_url()).0).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn zookeeper_run_stops_the_work_when_renewals_are_cut() {
        let proxy = proxy().await;
        run_stops_the_work_when_renewals_are_cut(client_through(&proxy).await, async || proxy.stall()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn zookeeper_control_spawned_work_runs_on_after_the_loss() {
        let proxy = proxy().await;
        control_spawned_work_runs_on_after_the_loss(client_through(&proxy).await, async || proxy.stall()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn zookeeper_finished_and_failed_work_release_the_lock() {
        let url = zookeeper_url();
        let (a, b) = (LockClient::connect(&url).await.unwrap(), LockClient::connect(&url).await.unwrap());
        finished_and_failed_work_release_the_lock(a, b).await;
    }
}

// --- etcd ---

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use crate::etcd_server::{endpoint, etcd_url};

    async fn client_through(proxy: &Proxy) -> LockClient {
        LockClient::builder(format!("etcd://{}", proxy.address()))
            .default_lease(Duration::from_secs(2))
            .connect()
            .await
            .unwrap()
    }

    async fn proxy() -> Proxy {
        Proxy::start_to(endpoint(&etcd_url()).trim_start_matches("http://").to_owned()).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_run_stops_the_work_when_renewals_are_cut() {
        let proxy = proxy().await;
        run_stops_the_work_when_renewals_are_cut(client_through(&proxy).await, async || proxy.stall()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_control_spawned_work_runs_on_after_the_loss() {
        let proxy = proxy().await;
        control_spawned_work_runs_on_after_the_loss(client_through(&proxy).await, async || proxy.stall()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_finished_and_failed_work_release_the_lock() {
        let url = etcd_url();
        let (a, b) = (LockClient::connect(&url).await.unwrap(), LockClient::connect(&url).await.unwrap());
        finished_and_failed_work_release_the_lock(a, b).await;
    }
}

// --- PostgreSQL: the lease table and advisory locks ---

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use crate::postgres_server::database_url;

    /// `host:port` of a `postgres://[user@]host:port/db` URL.
    fn host_port(url: &str) -> String {
        let rest = url.split_once("://").expect("a URL").1;
        let authority = rest.split('/').next().unwrap();
        authority.rsplit('@').next().unwrap().to_owned()
    }

    /// The shared server's URL with `scheme`, through `proxy`.
    fn url_through(proxy: &Proxy, scheme: &str) -> String {
        let base = database_url();
        base.replacen(&host_port(&base), &proxy.address(), 1).replacen("postgres://", &format!("{scheme}://"), 1)
    }

    async fn client_through(proxy: &Proxy, scheme: &str) -> LockClient {
        LockClient::builder(url_through(proxy, scheme))
            .default_lease(Duration::from_millis(1500))
            .connect()
            .await
            .unwrap()
    }

    async fn proxy() -> Proxy {
        Proxy::start_to(host_port(&database_url())).await
    }

    async fn clients(scheme: &str) -> (LockClient, LockClient) {
        let url = database_url().replacen("postgres://", &format!("{scheme}://"), 1);
        (LockClient::connect(&url).await.unwrap(), LockClient::connect(&url).await.unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_run_stops_the_work_when_renewals_are_cut() {
        let proxy = proxy().await;
        let client = client_through(&proxy, "postgres").await;
        run_stops_the_work_when_renewals_are_cut(client, async || proxy.stall()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_control_spawned_work_runs_on_after_the_loss() {
        let proxy = proxy().await;
        let client = client_through(&proxy, "postgres").await;
        control_spawned_work_runs_on_after_the_loss(client, async || proxy.stall()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_finished_and_failed_work_release_the_lock() {
        let (a, b) = clients("postgres").await;
        finished_and_failed_work_release_the_lock(a, b).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_advisory_run_stops_the_work_when_renewals_are_cut() {
        let proxy = proxy().await;
        let client = client_through(&proxy, "postgres+advisory").await;
        run_stops_the_work_when_renewals_are_cut(client, async || proxy.stall()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_advisory_control_spawned_work_runs_on_after_the_loss() {
        let proxy = proxy().await;
        let client = client_through(&proxy, "postgres+advisory").await;
        control_spawned_work_runs_on_after_the_loss(client, async || proxy.stall()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_advisory_finished_and_failed_work_release_the_lock() {
        let (a, b) = clients("postgres+advisory").await;
        finished_and_failed_work_release_the_lock(a, b).await;
    }
}
