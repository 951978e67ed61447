//! Redlock over 5 independent `redis-server` processes that each test owns: exclusion, the loss
//! of a minority and of a majority, and fences that never go backwards.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use lockkit::{BackendKind, LockClient};

use crate::{
    servers::Masters,
    support::{eventually, lock_key, unique},
};

async fn client(url: &str, lease: Duration) -> LockClient {
    LockClient::builder(url).default_lease(lease).connect().await.unwrap()
}

/// Tasks spread over `clients` take `name` in turn; returns how often two were inside at once.
async fn overlaps(clients: &[LockClient], name: &str) -> u32 {
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for task in 0..8 {
        let (client, name) = (clients[task % clients.len()].clone(), name.to_owned());
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            let mut fences = Vec::new();
            for _ in 0..6 {
                let guard = client.lock(&name, Duration::from_secs(20)).await.unwrap();
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                fences.push(guard.fence());
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
            fences
        }));
    }
    for task in tasks {
        let fences = task.await.unwrap();
        assert!(fences.windows(2).all(|w| w[0] < w[1]), "a holder's fences increase: {fences:?}");
    }
    overlaps.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_holders_on_five_masters() {
    let masters = Masters::start(5).await;
    let clients =
        [client(&masters.url(), Duration::from_secs(5)).await, client(&masters.url(), Duration::from_secs(5)).await];
    assert_eq!(clients[0].backend(), BackendKind::Redlock { nodes: 5, quorum: 3 });

    assert_eq!(overlaps(&clients, &unique("redlock")).await, 0);
}

/// Control: two clients whose majorities need not intersect ({0,1,2} and {2,3,4}, 2 of 3 each)
/// hold the lock at the same time, and the same check sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_disjoint_majorities_are_caught_holding_together() {
    let masters = Masters::start(5).await;
    let name = unique("redlock-control");
    let left = client(&masters.url_of(&[0, 1, 2]), Duration::from_secs(5)).await;
    let right = client(&masters.url_of(&[2, 3, 4]), Duration::from_secs(5)).await;
    // Node 2 is shared: take it away and each side still has its own majority.
    let mut masters = masters;
    masters.nodes[2].kill();

    assert!(overlaps(&[left, right], &name).await > 0, "the check must see two holders");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_two_of_five_keeps_locks_working() {
    let mut masters = Masters::start(5).await;
    let name = unique("redlock-minority");
    let a = client(&masters.url(), Duration::from_millis(600)).await;
    let b = client(&masters.url(), Duration::from_millis(600)).await;
    let held = a.lock(&name, Duration::from_secs(1)).await.unwrap();

    masters.nodes[0].kill();
    masters.nodes[3].kill();
    // Several renewals later (a third of the lease each), the lease still stands on 3 of 5.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    assert!(!held.is_lost(), "renewals by a majority keep the lease");
    assert!(b.try_lock(&name).await.unwrap().is_none(), "still exclusive");
    let fence = held.fence();
    assert!(held.release().await.unwrap());
    let next = b.lock(&name, Duration::from_secs(2)).await.unwrap();
    assert!(next.fence() > fence);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_three_of_five_fails_cleanly() {
    let mut masters = Masters::start(5).await;
    let (held_name, name) = (unique("redlock-held"), unique("redlock-majority"));
    let a = client(&masters.url(), Duration::from_millis(600)).await;
    let held = a.lock(&held_name, Duration::from_secs(1)).await.unwrap();

    for i in [0, 2, 4] {
        masters.nodes[i].kill();
    }

    let err = a.lock(&name, Duration::from_millis(300)).await.unwrap_err();
    assert!(err.is_no_quorum(), "{err}");
    for i in [1, 3] {
        let mut conn = masters.nodes[i].conn().await;
        let exists: bool = redis::cmd("EXISTS").arg(lock_key(&name)).query_async(&mut conn).await.unwrap();
        assert!(!exists, "a failed attempt leaves no key on node {i}");
    }
    // The held lease cannot be renewed by a majority any more: its holder is told.
    let lost = tokio::time::timeout(Duration::from_secs(3), held.lost()).await;
    assert!(lost.is_ok(), "the holder learns that its lease is gone");
}

/// Fences carry over from one majority to the next through the nodes they share, even when the
/// other nodes restarted empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_never_go_backwards_across_majorities_and_empty_restarts() {
    let mut masters = Masters::start(5).await;
    let name = unique("redlock-fence");
    let fence_key = format!("{}:fence", lock_key(&name));
    // Node 0 has seen many more grants than the others (an earlier history).
    let _: () =
        redis::cmd("SET").arg(&fence_key).arg(100).query_async(&mut masters.nodes[0].conn().await).await.unwrap();
    masters.nodes[3].kill();
    masters.nodes[4].kill();
    let first = {
        let c = client(&masters.url(), Duration::from_secs(5)).await;
        let g = c.lock(&name, Duration::from_secs(2)).await.unwrap();
        let fence = g.fence();
        g.release().await.unwrap();
        fence
    };
    assert_eq!(first.get(), 101, "the grant takes the largest counter of its majority");

    // Now a majority {2, 3, 4} that shares only node 2 with the first one; 3 and 4 come back
    // empty, and 0 and 1 are gone.
    masters.nodes[3].restart_empty().await;
    masters.nodes[4].restart_empty().await;
    masters.nodes[0].kill();
    masters.nodes[1].kill();
    let c = client(&masters.url(), Duration::from_secs(5)).await;
    let g = c.lock(&name, Duration::from_secs(2)).await.unwrap();
    assert!(g.fence() > first, "fence {} after {first}", g.fence());
    g.release().await.unwrap();

    // And a node restarted empty inside the next majority does not pull it back either.
    let latest = c.inspect(&name).await.unwrap()[0].fence.unwrap();
    masters.nodes[0].restart_empty().await;
    masters.nodes[2].restart_empty().await;
    masters.nodes[3].kill();
    let mut conn = masters.nodes[4].conn().await;
    assert!(eventually(Duration::from_secs(1), || async { masters.nodes[0].connect().await.is_some() }).await);
    let _: redis::Value = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    let g = c.lock(&name, Duration::from_secs(2)).await.unwrap();
    assert!(g.fence() > latest, "fence {} after {latest}", g.fence());
    g.release().await.unwrap();
}

/// Control for the fence check above: had the first grant not written its fence back, the node
/// shared with the next majority would have carried only its own count, and the next fence would
/// have gone backwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_without_write_back_the_fence_would_go_backwards() {
    let mut masters = Masters::start(5).await;
    let name = unique("redlock-fence-control");
    let fence_key = format!("{}:fence", lock_key(&name));
    let _: () =
        redis::cmd("SET").arg(&fence_key).arg(100).query_async(&mut masters.nodes[0].conn().await).await.unwrap();
    masters.nodes[3].kill();
    masters.nodes[4].kill();
    let c = client(&masters.url(), Duration::from_secs(5)).await;
    let g = c.lock(&name, Duration::from_secs(2)).await.unwrap();
    let first = g.fence();
    g.release().await.unwrap();
    // Undo the write-back on node 2: it keeps only its own count, 1.
    let _: () = redis::cmd("SET").arg(&fence_key).arg(1).query_async(&mut masters.nodes[2].conn().await).await.unwrap();

    masters.nodes[3].restart_empty().await;
    masters.nodes[4].restart_empty().await;
    masters.nodes[0].kill();
    masters.nodes[1].kill();
    let g = c.lock(&name, Duration::from_secs(2)).await.unwrap();

    assert!(g.fence() < first, "without the write-back the check above would fail");
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_keeps_the_majority_view_and_reports_primitives_as_unsupported() {
    let masters = Masters::start(3).await;
    let client = client(&masters.url(), Duration::from_secs(20)).await;
    let name = unique("redlock-inspect");
    let guard = client.acquire(&name).await.unwrap();

    let info = &client.inspect(&name).await.unwrap()[0];

    assert!(info.held);
    assert_eq!(info.kind, lockkit::LockKind::Plain);
    assert_eq!(info.fence, Some(guard.fence()));
    assert_eq!(info.holders.len(), 1);
    assert!(info.holders[0].ttl.is_some_and(|t| t <= Duration::from_secs(20)));
    guard.release().await.unwrap();

    // A primitive's keys (put there by hand: Redlock refuses the primitives) are not interpreted.
    let sem = unique("redlock-inspect-sem");
    assert!(client.semaphore(&sem, 2).await.unwrap_err().is_unsupported());
    let mut conn = masters.nodes[0].conn().await;
    let _: () = redis::cmd("ZADD")
        .arg(format!("{}:permits", lock_key(&sem)))
        .arg("+inf")
        .arg("someone")
        .query_async(&mut conn)
        .await
        .unwrap();
    let info = &client.inspect(&sem).await.unwrap()[0];
    assert_eq!(info.kind, lockkit::LockKind::Unsupported);
    assert!(!info.held && info.holders.is_empty());
}
