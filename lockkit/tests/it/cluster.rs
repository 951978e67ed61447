//! A real 3-master Redis Cluster that each test owns: locks spread over the masters, exclusion and
//! waiting work across them, and a slot migrated under held locks changes nothing for the holder.

use std::time::Duration;

use lockkit::{BackendKind, LockClient};

use crate::{
    servers::Cluster,
    support::{lock_key, unique},
};

async fn client(cluster: &Cluster, lease: Duration) -> LockClient {
    LockClient::builder(cluster.url()).default_lease(lease).connect().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_spread_over_the_masters_and_exclude() {
    let cluster = Cluster::start().await;
    let a = client(&cluster, Duration::from_secs(5)).await;
    let b = client(&cluster, Duration::from_secs(5)).await;
    assert_eq!(a.backend(), BackendKind::RedisCluster);

    let mut guards = Vec::new();
    let mut masters = std::collections::BTreeSet::new();
    for _ in 0..12 {
        let name = unique("cluster");
        let guard = a.try_lock(&name).await.unwrap().expect("free");
        masters.insert(cluster.node_holding(&lock_key(&name)).await.expect("the key lives on a master"));
        assert!(b.try_lock(&name).await.unwrap().is_none(), "exclusive across clients");
        guards.push(guard);
    }
    assert!(masters.len() >= 2, "12 locks on {} master(s)", masters.len());

    let infos = b.inspect("test:cluster:*").await.unwrap();
    assert!(infos.iter().filter(|i| i.held).count() >= 12, "inspect scans every master");
    for guard in guards {
        assert!(guard.release().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_a_release_on_another_master() {
    let cluster = Cluster::start().await;
    let a = client(&cluster, Duration::from_secs(30)).await;
    let b = client(&cluster, Duration::from_secs(30)).await;
    let name = unique("cluster-wait");
    let held = a.lock(&name, Duration::from_secs(1)).await.unwrap();
    let first = held.fence();

    let waiter = tokio::spawn(async move { b.lock(&name, Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(held.release().await.unwrap());
    let next = waiter.await.unwrap().unwrap();

    assert!(next.fence() > first);
    // Woken by the release (a 30 s lease would otherwise keep it waiting for the safety
    // interval of 5 s): one attempt before the release, one after (allowing one retry).
    assert!(next.attempts() <= 3, "woken, not polling: {} attempts", next.attempts());
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_under_a_held_lock_changes_nothing_for_the_holder() {
    let cluster = Cluster::start().await;
    let a = client(&cluster, Duration::from_millis(900)).await;
    let b = client(&cluster, Duration::from_millis(900)).await;
    let name = unique("cluster-migrate");
    let key = lock_key(&name);
    let held = a.lock(&name, Duration::from_secs(1)).await.unwrap();
    let from = cluster.node_holding(&key).await.unwrap();
    let to = (from + 1) % 3;
    let slot: u16 =
        redis::cmd("CLUSTER").arg("KEYSLOT").arg(&key).query_async(&mut cluster.nodes[0].conn().await).await.unwrap();

    cluster.migrate_slot(slot, from, to).await;
    // Several renewals (a third of the lease each) now go to the new master through MOVED.
    tokio::time::sleep(Duration::from_millis(2000)).await;

    assert_eq!(cluster.node_holding(&key).await, Some(to), "the lock key moved with its slot");
    assert!(!held.is_lost(), "renewals followed the slot");
    assert!(b.try_lock(&name).await.unwrap().is_none(), "still exclusive after the move");
    let fence = held.fence();
    assert!(held.release().await.unwrap(), "the owner-checked release reaches the new master");
    let next = b.try_lock(&name).await.unwrap().expect("free after release");
    assert!(next.fence() > fence, "the fence counter moved with the lock");
    next.release().await.unwrap();
}
