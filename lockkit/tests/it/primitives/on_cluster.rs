//! Every primitive on a 3-master Redis Cluster: each keeps all its keys under one hash tag.

use std::{collections::BTreeSet, time::Duration};

use lockkit::{FenceRetirement, LockClient};

use crate::{servers::Cluster, support::unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_works_on_a_cluster() {
    let cluster = Cluster::start().await;
    let a = LockClient::connect(&cluster.url()).await.unwrap();
    let b = LockClient::connect(&cluster.url()).await.unwrap();

    // Lock-delay: an expired lease leaves the lock delayed.
    let name = unique("c-delay");
    std::mem::forget(
        a.acquire(&name).lease(Duration::from_millis(100)).lock_delay(Duration::from_secs(30)).await.unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(b.try_lock(&name).await.unwrap().is_none(), "delayed");
    let info = &b.inspect(&name).await.unwrap()[0];
    assert!(info.delay.is_some_and(|d| d > Duration::from_secs(20)), "inspect reads the delay on its master");

    // Reentrant.
    let name = unique("c-reentrant");
    let outer = a.reentrant(&name, "x").await.unwrap();
    let inner = b.reentrant(&name, "x").await.unwrap();
    assert_eq!(outer.fence(), inner.fence());
    assert!(b.reentrant(&name, "y").await.unwrap_err().is_timeout());
    inner.release().await.unwrap();
    outer.release().await.unwrap();
    b.reentrant(&name, "y").await.unwrap().release().await.unwrap();

    // Semaphore.
    let name = unique("c-semaphore");
    let p1 = a.semaphore(&name, 2).await.unwrap();
    let p2 = b.semaphore(&name, 2).await.unwrap();
    assert_ne!(p1.fence(), p2.fence());
    assert!(a.semaphore(&name, 2).await.unwrap_err().is_timeout());
    let info = &b.inspect(&name).await.unwrap()[0];
    assert_eq!((info.kind, info.permits, info.holders.len()), (lockkit::LockKind::Semaphore, Some(2), 2));
    p1.release().await.unwrap();
    p2.release().await.unwrap();

    // Read-write.
    let name = unique("c-rw");
    let r1 = a.read_write(&name).read().await.unwrap();
    let r2 = b.read_write(&name).read().await.unwrap();
    assert!(a.read_write(&name).write().await.unwrap_err().is_timeout());
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = b.read_write(&name).write().wait(Duration::from_secs(10)).await.unwrap();
    w.downgrade().await.unwrap().release().await.unwrap();

    // Fair: a waiter is woken by the release.
    let name = unique("c-fair");
    let held = a.fair(&name).await.unwrap();
    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move { b.fair(&name).wait(Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fence = held.fence();
    held.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert!(next.fence() > fence);
    next.release().await.unwrap();

    // Multi-lock over names on different masters: 16 random names all on one of 3 masters has a
    // chance of 3^-15 (with 6 it was 1 in 243, and a run hit it).
    let names: Vec<String> = (0..16).map(|_| unique("c-multi")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let all = a.multi(&refs).await.unwrap();
    let mut masters = BTreeSet::new();
    for name in &names {
        masters.insert(cluster.node_holding(&format!("{{lockkit:{name}}}")).await.unwrap());
    }
    assert!(masters.len() >= 2, "the names spread over the masters");
    assert!(b.multi(&refs[3..]).await.unwrap_err().is_timeout());
    assert!(all.release().await.unwrap());

    // Fence retirement.
    assert!(matches!(a.retire_fence(&names[0]).await.unwrap(), FenceRetirement::Retired { .. }));
}
