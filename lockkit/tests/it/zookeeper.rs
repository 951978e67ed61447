//! The zk:// backend (Curator's `InterProcessMutex` layout) on a real ZooKeeper: exclusion, the
//! wake-up of a parked waiter, loss when the session is lost, renewals that sync with the leader
//! (through `zookeeper_proxy`, playing a cut-off follower), who may delete a lock node with and
//! without credentials, fences (zxids) across holders and a restart, cancellation, and interop
//! with Python's kazoo `Lock`. Tests that freeze, kill or
//! restart the server own one (`zookeeper_server`); the others use the shared `ZOOKEEPER_URL`.

#![cfg(feature = "zookeeper")]

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use lockkit::{BackendKind, Fence, LeaseLoss, LockClient, LockKind, Unprotected};
use zookeeper_client as zk;

use crate::{
    support::{cancelled_at_varied_points, eventually, unique},
    waiters::attempts_in_a_line_of_waiters,
    zookeeper_proxy::ZkProxy,
    zookeeper_server::{ZkServer, split_url, zookeeper_url},
};

/// Every test is bounded in time.
const TEST_BOUND: Duration = Duration::from_secs(90);

async fn client(url: &str) -> LockClient {
    LockClient::connect(url).await.unwrap()
}

/// A plain ZooKeeper session, standing in for an operator: the children of a lock's node.
async fn children(url: &str, name: &str) -> Vec<String> {
    let (hosts, chroot) = split_url(url);
    let raw = zk::Client::connect(&hosts).await.unwrap();
    match raw.list_children(&format!("{chroot}/{name}")).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing {name}: {e}"),
    }
}

/// Tasks spread over `clients` each enter a critical section six times, under the lock `name_of`
/// gives them; returns how often two tasks were inside at once, and each task's fences.
async fn overlaps(clients: &[LockClient], name_of: impl Fn(usize) -> String) -> (u32, Vec<Vec<Fence>>) {
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for task in 0..8 {
        let (client, name) = (clients[task % clients.len()].clone(), name_of(task));
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            let mut fences = Vec::new();
            for _ in 0..6 {
                let guard = client.lock(&name, Duration::from_secs(30)).await.unwrap();
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                fences.push(guard.fence());
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
            fences
        }));
    }
    let mut fences = Vec::new();
    for task in tasks {
        fences.push(task.await.unwrap());
    }
    (overlaps.load(Ordering::SeqCst), fences)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_no_two_holders_and_the_detector_catches_overlap() {
    tokio::time::timeout(TEST_BOUND, async {
        let url = zookeeper_url();
        let clients = [client(&url).await, client(&url).await];
        assert_eq!(clients[0].backend(), BackendKind::ZooKeeper);
        let name = unique("zk-exclusive");

        let (overlapped, fences) = overlaps(&clients, |_| name.clone()).await;
        // Control: the same tasks, each under its own name, so nothing excludes them.
        let (control, _) = overlaps(&clients, |task| format!("{name}-{task}")).await;

        assert_eq!(overlapped, 0, "two holders at once");
        assert!(control > 0, "the detector must see overlap when the lock does not exclude");
        let mut all: Vec<Fence> = fences.concat();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 48, "every grant has its own fence");
        assert!(children(&url, &name).await.is_empty(), "every node deleted on release");
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_parked_waiter_is_woken_by_the_release() {
    tokio::time::timeout(TEST_BOUND, async {
        let url = zookeeper_url();
        let holder = client(&url).await;
        // A wake-up that never came would leave the waiter asleep for 30 s, past its 20 s wait.
        let waiter = LockClient::builder(&url).wake_safety_interval(Duration::from_secs(30)).connect().await.unwrap();
        let name = unique("zk-wake");
        let guard = holder.try_lock(&name).await.unwrap().expect("free");
        let parked = {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(
                async move { waiter.lock(&name, Duration::from_secs(20)).await.expect("woken by the release") },
            )
        };
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(!parked.is_finished());

        assert!(guard.release().await.unwrap());
        let granted = parked.await.unwrap();

        assert!(granted.attempts() <= 3, "woken, not polling: {} attempts", granted.attempts());
        granted.release().await.unwrap();
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_release_wakes_only_the_waiter_behind_it() {
    tokio::time::timeout(TEST_BOUND, async {
        let url = zookeeper_url();
        let (holding, waiting) = (client(&url).await, client(&url).await);

        let attempts = attempts_in_a_line_of_waiters(&holding, &waiting, 6).await;

        // The first try, the one right after subscribing, the one after its predecessor left (and
        // one to spare); woken by every release of the lock, the last would make up to 8.
        assert!(attempts.iter().all(|&a| a <= 4), "attempts along the line: {attempts:?}");
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_lost_fires_when_the_session_is_lost_and_the_client_recovers() {
    tokio::time::timeout(TEST_BOUND, async {
        // Sessions of 0.4 to 4 s; this client asks for 2 s.
        let server = ZkServer::start(Duration::from_millis(200));
        let url = server.url("lockkit-lost");
        let session = Duration::from_secs(2);
        let client = LockClient::builder(&url).default_lease(session).connect().await.unwrap();
        let name = unique("zk-lost");
        let guard = client.try_lock(&name).await.unwrap().expect("free");
        let (lost, fence) = (guard.lost(), guard.fence());

        server.freeze();
        let frozen_at = Instant::now();
        let cause = tokio::time::timeout(session * 3, lost).await.expect("lost() fires within the session timeout");
        let after = frozen_at.elapsed();
        // Frozen past 7/5 of the session timeout, the client gives the session up as expired.
        tokio::time::sleep((session * 2).saturating_sub(frozen_at.elapsed())).await;
        server.thaw();

        assert_eq!(cause, LeaseLoss::Expired, "unanswered while suspended, until the lease ended");
        assert!(after <= session + Duration::from_millis(500), "lost {after:?} after the freeze");
        assert!(!guard.release().await.unwrap(), "the release reports that the lock was no longer held");
        // The session expired; the same client opens a new one, and the name is free.
        let again = client.lock(&name, Duration::from_secs(20)).await.unwrap();
        assert!(again.fence() > fence, "a new grant, after the lost one");
        again.release().await.unwrap();
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_deleted_node_is_lost_at_the_next_renewal() {
    tokio::time::timeout(TEST_BOUND, async {
        let url = zookeeper_url();
        let lease = Duration::from_secs(3);
        let client = LockClient::builder(&url).default_lease(lease).connect().await.unwrap();
        let name = unique("zk-deleted");
        let guard = client.try_lock(&name).await.unwrap().expect("free");
        let node = children(&url, &name).await.pop().expect("our node");

        let (hosts, chroot) = split_url(&url);
        let operator = zk::Client::connect(&hosts).await.unwrap();
        operator.delete(&format!("{chroot}/{name}/{node}"), None).await.unwrap();

        let cause = tokio::time::timeout(lease, guard.lost()).await.expect("lost() fires");
        // Gone, not Expired: a renewal found the node missing before the lease ran out.
        assert_eq!(cause, LeaseLoss::Gone);
        assert!(!guard.release().await.unwrap());
    })
    .await
    .expect("bounded");
}

/// The digest identity of the ACL tests.
const USER: &str = "lockkit-test";
const PASSWORD: &str = "s3cret";

/// `url` with `USER:PASSWORD@` before its hosts.
fn with_credentials(url: &str) -> String {
    url.replacen("zk://", &format!("zk://{USER}:{PASSWORD}@"), 1)
}

/// A lockkit client of `url` holds a new lock; a session without credentials, standing in for
/// any other client of the ensemble, tries to delete the holder's node. Returns what ZooKeeper
/// answered it, and the guard.
async fn stranger_deletes_the_holders_node(url: &str) -> (Result<(), zk::Error>, lockkit::LockGuard) {
    let client = client(url).await;
    let name = unique("zk-acl");
    let guard = client.try_lock(&name).await.unwrap().expect("free");
    let (hosts, chroot) = split_url(&zookeeper_url());
    // Listing the waiters needs the owner's identity too once they are protected.
    let owner =
        zk::Client::connector().with_auth("digest", format!("{USER}:{PASSWORD}").as_bytes()).connect(&hosts).await;
    let node = owner.unwrap().list_children(&format!("{chroot}/{name}")).await.unwrap().pop().expect("our node");
    let stranger = zk::Client::connect(&hosts).await.unwrap();

    let deleted = stranger.delete(&format!("{chroot}/{name}/{node}"), None).await;

    (deleted, guard)
}

/// With credentials in the URL (`zk://user:password@host/chroot`), the nodes lockkit creates are
/// `creator_all`: a session without them may not delete the holder's node (ZooKeeper checks a
/// delete against its parent, the lock's node, which is the identity's too), so it cannot take the
/// lock from under its holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_with_credentials_another_session_cannot_delete_the_lock_node() {
    tokio::time::timeout(TEST_BOUND, async {
        let (deleted, guard) = stranger_deletes_the_holders_node(&with_credentials(&zookeeper_url())).await;

        assert_eq!(deleted, Err(zk::Error::NoAuth));
        assert!(guard.release().await.unwrap(), "still held");
    })
    .await
    .expect("bounded");
}

/// The control: without credentials the nodes are `anyone_all`, and the same session deletes the
/// holder's node (documented: anyone who reaches the ensemble can).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_control_without_credentials_anyone_deletes_the_lock_node() {
    tokio::time::timeout(TEST_BOUND, async {
        let (deleted, guard) = stranger_deletes_the_holders_node(&zookeeper_url()).await;

        assert_eq!(deleted, Ok(()));
        assert!(!guard.release().await.unwrap(), "no longer held");
    })
    .await
    .expect("bounded");
}

/// A holder behind [`ZkProxy`], which plays a follower cut off from its leader once
/// `hold_syncs` is called. Returns the guard, the proxy and the lease.
async fn holder_behind_a_follower(
    builder: impl FnOnce(String) -> lockkit::LockClientBuilder,
) -> (lockkit::LockGuard, ZkProxy, Duration) {
    let (hosts, chroot) = split_url(&zookeeper_url());
    let proxy = ZkProxy::start(&hosts).await;
    // Not shorter: the client gives up on a connection that is silent for 2/5 of the session
    // timeout (the lease), and the shared server, on a busy machine, pauses for seconds at times.
    let lease = Duration::from_secs(8);
    let client = builder(proxy.url(&chroot)).default_lease(lease).connect().await.unwrap();
    let guard = client.try_lock(&unique("zk-sync")).await.unwrap().expect("free");
    (guard, proxy, lease)
}

/// A renewal syncs with the leader before it reads our node: a follower answers a read from its
/// own view, which still shows a session alive that the leader already expired. One ZooKeeper
/// server has no follower, so the proxy plays one cut off from its leader: reads pass, a `sync`
/// never completes. The renewals then go unanswered and the lease is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_renewal_that_cannot_sync_with_the_leader_loses_the_lease() {
    tokio::time::timeout(TEST_BOUND, async {
        let (guard, proxy, lease) = holder_behind_a_follower(LockClient::builder).await;

        proxy.hold_syncs();
        let lost = tokio::time::timeout(lease * 3, guard.lost()).await;

        assert!(lost.is_ok(), "a renewal that could not sync did not renew the lease");
        assert!(proxy.syncs() > 0, "renewals sent a sync");
    })
    .await
    .expect("bounded");
}

/// The control: renewals that only read (no sync) keep renewing through that follower, lease
/// after lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_control_renewals_without_sync_keep_the_lease_through_a_cut_off_follower() {
    tokio::time::timeout(TEST_BOUND, async {
        let (guard, proxy, lease) = holder_behind_a_follower(|url| {
            LockClient::builder(url).unprotected(Unprotected::ZooKeeperRenewalWithoutSync)
        })
        .await;

        proxy.hold_syncs();
        let lost = tokio::time::timeout(lease * 2, guard.lost()).await;

        assert!(lost.is_err(), "still held after two leases: {lost:?}");
        assert_eq!(proxy.syncs(), 0);
        assert!(guard.release().await.unwrap());
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_fences_increase_across_holders_and_a_server_restart() {
    tokio::time::timeout(TEST_BOUND, async {
        let mut server = ZkServer::start(Duration::from_millis(200));
        let url = server.url("lockkit-fences");
        let (a, b) = (client(&url).await, client(&url).await);
        let name = unique("zk-fence");
        let mut fences = Vec::new();
        for round in 0..6 {
            let holder = if round % 2 == 0 { &a } else { &b };
            let guard = holder.lock(&name, Duration::from_secs(10)).await.unwrap();
            fences.push(guard.fence());
            guard.release().await.unwrap();
        }

        server.restart();
        let after_restart = a.lock(&name, Duration::from_secs(30)).await.unwrap();
        fences.push(after_restart.fence());

        assert!(fences.windows(2).all(|w| w[0] < w[1]), "fences strictly increase: {fences:?}");
        // A fence is a zxid: it can be confirmed but not raised.
        let current = a.ensure_fence_at_least(&name, fences[0]).await.unwrap();
        assert!(current >= after_restart.fence());
        let refused = a.ensure_fence_at_least(&name, Fence::new(i64::MAX as u64)).await.unwrap_err();
        assert!(refused.is_unsupported() && !refused.is_retryable(), "{refused}");
        after_restart.release().await.unwrap();
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_dropped_acquires_leave_no_node_behind() {
    tokio::time::timeout(TEST_BOUND, async {
        let url = zookeeper_url();
        let (client, other) = (client(&url).await, client(&url).await);
        let name = unique("zk-dropped-acquire");
        let mut cancelled = 0;

        // Cancel acquires at varied points of their round trips (before the create was sent,
        // after the server created the node but before the answer arrived, ...).
        for i in 0..60u64 {
            match cancelled_at_varied_points(i, (50, 97, 3000), client.try_lock(&name)).await {
                Some(result) => assert!(result.unwrap().expect("free").release().await.unwrap()),
                None => cancelled += 1,
            }
            let next = other.lock(&name, Duration::from_secs(5)).await.unwrap();
            next.release().await.unwrap();
        }
        // A waiter dropped while parked leaves its node too.
        let holder = other.try_lock(&name).await.unwrap().expect("free");
        let parked =
            tokio::time::timeout(Duration::from_millis(300), client.lock(&name, Duration::from_secs(10))).await;
        assert!(parked.is_err(), "still waiting when dropped");
        holder.release().await.unwrap();

        assert!(cancelled > 0, "some acquires must have been cancelled for this test to mean anything");
        let emptied = eventually(Duration::from_secs(5), || {
            let (url, name) = (url.clone(), name.clone());
            async move { children(&url, &name).await.is_empty() }
        })
        .await;
        assert!(emptied, "nodes left behind: {:?}", children(&url, &name).await);
        let free = other.try_lock(&name).await.unwrap().expect("the next acquire succeeds at once");
        free.release().await.unwrap();
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_cancelled_releases_still_release() {
    tokio::time::timeout(TEST_BOUND, async {
        let url = zookeeper_url();
        let client = client(&url).await;
        let names: Vec<String> = (0..40).map(|_| unique("zk-cancelled-release")).collect();
        let mut guards = Vec::new();
        for name in &names {
            guards.push(client.try_lock(name).await.unwrap().unwrap());
        }

        for (i, guard) in guards.into_iter().enumerate() {
            let _ = tokio::time::timeout(Duration::from_micros(1 + (i as u64 * 131) % 2000), guard.release()).await;
        }

        let released = eventually(Duration::from_secs(5), || {
            let (url, names, held) = (url.clone(), names.clone(), client.held_leases());
            async move {
                for name in &names {
                    if !children(&url, name).await.is_empty() {
                        return false;
                    }
                }
                held == 0
            }
        })
        .await;
        assert!(released, "nodes left behind or leases still watched");
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_a_fixed_lease_ends_by_itself() {
    tokio::time::timeout(TEST_BOUND, async {
        let url = zookeeper_url();
        let (client, other) = (client(&url).await, client(&url).await);
        let name = unique("zk-fixed-lease");
        let guard = client.acquire(&name).lease(Duration::from_millis(700)).await.unwrap();

        let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost()).await.expect("lost at the lease's end");
        let next = other.lock(&name, Duration::from_secs(3)).await.expect("the node is deleted at the lease's end");

        assert_eq!(lost, LeaseLoss::Expired);
        assert!(next.fence() > guard.fence());
        assert!(!guard.release().await.unwrap());
        next.release().await.unwrap();
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_inspect_shows_the_holder_and_its_fence_and_refuses_primitives() {
    tokio::time::timeout(TEST_BOUND, async {
        let url = zookeeper_url();
        let client = client(&url).await;
        let name = unique("zk-inspect");
        let guard = client.try_lock(&name).await.unwrap().expect("free");

        let infos = client.inspect(&format!("{name}*")).await.unwrap();

        assert_eq!(infos.len(), 1, "{infos:?}");
        assert_eq!(infos[0].name, name);
        assert!(infos[0].held);
        assert_eq!(infos[0].kind, LockKind::Plain);
        assert_eq!(infos[0].fence, Some(guard.fence()));
        assert_eq!(infos[0].holders.len(), 1);
        assert!(client.inspect("no-such-lock-*").await.unwrap().is_empty());
        let refused = client.semaphore(&name, 2).await.unwrap_err();
        assert!(refused.is_unsupported() && !refused.is_retryable(), "{refused}");
        let refused = client.acquire(&name).lock_delay(Duration::from_secs(1)).await.unwrap_err();
        assert!(refused.is_unsupported() && !refused.is_retryable(), "{refused}");
        guard.release().await.unwrap();
    })
    .await
    .expect("bounded");
}

/// Python's kazoo, from the venv that `scripts/kazoo.sh` keeps (installed on first use).
fn kazoo_python() -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/kazoo.sh");
    let out = Command::new("bash").arg(script).stderr(Stdio::inherit()).output().unwrap();
    assert!(out.status.success(), "scripts/kazoo.sh could not provide kazoo");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A kazoo `Lock` that counts Curator's `-lock-` nodes as contenders. `hold MS`: takes the lock
/// (waiting up to 20 s), prints `held`, holds it MS ms, releases, prints `released`.
/// `try SECONDS`: prints `acquired` (and releases) or `timeout`.
const KAZOO: &str = r#"
import sys
from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout
hosts, path, mode, arg = sys.argv[1:5]
zk = KazooClient(hosts=hosts, timeout=10)
zk.start(timeout=10)
lock = zk.Lock(path, "kazoo", extra_lock_patterns=["-lock-"])
if mode == "hold":
    lock.acquire(timeout=20)
    print("held", flush=True)
    import time; time.sleep(int(arg) / 1000)
    lock.release()
    print("released", flush=True)
else:
    try:
        lock.acquire(timeout=float(arg))
        print("acquired", flush=True)
        lock.release()
    except LockTimeout:
        print("timeout", flush=True)
zk.stop()
"#;

fn kazoo(python: &str, url: &str, name: &str, mode: &str, arg: &str) -> Command {
    let (hosts, chroot) = split_url(url);
    let mut command = Command::new(python);
    command.args(["-c", KAZOO, &hosts, &format!("{chroot}/{name}"), mode, arg]).stdout(Stdio::piped());
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_kazoo_and_lockkit_exclude_each_other() {
    tokio::time::timeout(TEST_BOUND, async {
        let url = zookeeper_url();
        let python = kazoo_python();
        let client = client(&url).await;
        let name = unique("zk-kazoo");

        // kazoo holds: we time out, then get it once kazoo lets go.
        let mut holder = kazoo(&python, &url, &name, "hold", "1500").spawn().unwrap();
        let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
        let first = tokio::task::spawn_blocking(move || (lines.next(), lines)).await.unwrap();
        assert_eq!(first.0.unwrap().unwrap(), "held");
        let refused = client.lock(&name, Duration::from_millis(300)).await.unwrap_err();
        assert!(refused.is_timeout(), "{refused}");
        let ours = client.lock(&name, Duration::from_secs(20)).await.unwrap();
        assert_eq!(children(&url, &name).await.len(), 1, "granted while kazoo's node was still there");
        let mut lines = first.1;
        assert_eq!(lines.next().unwrap().unwrap(), "released", "granted only after kazoo released");
        assert!(holder.wait().unwrap().success());

        // We hold: kazoo times out, then gets it once we let go.
        let blocked = tokio::task::spawn_blocking({
            let (python, url, name) = (python.clone(), url.clone(), name.clone());
            move || kazoo(&python, &url, &name, "try", "0.5").output().unwrap()
        })
        .await
        .unwrap();
        assert_eq!(String::from_utf8_lossy(&blocked.stdout).trim(), "timeout");
        ours.release().await.unwrap();
        let after = tokio::task::spawn_blocking(move || kazoo(&python, &url, &name, "try", "5").output().unwrap())
            .await
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&after.stdout).trim(), "acquired");
    })
    .await
    .expect("bounded");
}
