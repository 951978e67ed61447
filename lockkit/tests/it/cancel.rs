//! Cancellation: dropped guards and dropped acquire futures leave no lock behind.

use std::time::Duration;

use futures_util::FutureExt;
use lockkit::LockClient;

use crate::support::{Proxy, cancelled_at_varied_points, client, eventually, exists, lock_key, raw, unique};

#[tokio::test]
async fn dropping_a_guard_releases_in_the_background() {
    let client = client().await;
    let mut conn = raw().await;
    let name = unique("dropped-guard");
    let guard = client.try_lock(&name).await.unwrap().unwrap();
    assert!(exists(&mut conn, &lock_key(&name)).await);

    drop(guard);

    assert!(
        eventually(Duration::from_secs(5), || {
            let mut c = conn.clone();
            let k = lock_key(&name);
            async move { !exists(&mut c, &k).await }
        })
        .await
    );
    assert_eq!(client.held_leases(), 0);
}

/// `flush` returns once the background release of a dropped guard is done: the key is gone at
/// that moment, not eventually. Without the flush (the control) it is still there right after the
/// drop.
#[tokio::test]
async fn flush_waits_for_the_background_release() {
    let client = client().await;
    let mut conn = raw().await;
    let (flushed, control) = (unique("flushed"), unique("not-flushed"));
    let guards = (client.try_lock(&flushed).await.unwrap().unwrap(), client.try_lock(&control).await.unwrap().unwrap());

    drop(guards.1);
    assert!(exists(&mut conn, &lock_key(&control)).await, "a dropped guard is released later, not at once");
    drop(guards.0);
    assert!(client.flush(Duration::from_secs(5)).await);

    assert!(!exists(&mut conn, &lock_key(&flushed)).await);
}

#[tokio::test]
async fn dropped_acquire_futures_leave_no_lock_behind() {
    let client = client().await;
    let mut conn = raw().await;
    let name = unique("dropped-acquire");
    let mut cancelled = 0;

    // Cancel acquires at varied points of their round trip.
    for i in 0..300u64 {
        match cancelled_at_varied_points(i, (20, 37, 900), client.try_lock(&name)).await {
            Some(result) => drop(result.unwrap()),
            None => cancelled += 1,
        }
        let key = lock_key(&name);
        let freed = eventually(Duration::from_secs(5), || {
            let (mut c, k) = (conn.clone(), key.clone());
            async move { !exists(&mut c, &k).await }
        })
        .await;
        assert!(freed, "lock left behind after iteration {i}");
    }

    assert!(cancelled > 0, "some acquires must have been cancelled for this test to mean anything");
    assert!(!exists(&mut conn, &lock_key(&name)).await);
}

/// Whether every key is gone and the client watches no lease any more, polled for up to `within`.
async fn all_released(client: &LockClient, names: &[String], within: Duration) -> bool {
    let conn = raw().await;
    eventually(within, || {
        let mut conn = conn.clone();
        let keys: Vec<String> = names.iter().map(|n| lock_key(n)).collect();
        let held = client.held_leases();
        async move {
            let existing: usize = redis::cmd("EXISTS").arg(&keys).query_async(&mut conn).await.unwrap();
            existing == 0 && held == 0
        }
    })
    .await
}

/// A release cancelled during its script round trip still happens, long before the 30 s lease
/// would have freed the lock.
#[tokio::test]
async fn cancelled_releases_still_release() {
    let client = client().await;
    let names: Vec<String> = (0..200).map(|_| unique("cancelled-release")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(client.try_lock(name).await.unwrap().unwrap());
    }

    // Half are dropped right after their first poll (the script queued, not yet written), the
    // others at varied points of the round trip.
    for (i, guard) in guards.into_iter().enumerate() {
        if i % 2 == 0 {
            let _ = guard.release().now_or_never();
        } else {
            let _ = tokio::time::timeout(Duration::from_micros(1 + (i as u64 * 37) % 400), guard.release()).await;
        }
    }

    assert!(all_released(&client, &names, Duration::from_secs(5)).await, "keys left behind or leases still watched");
}

/// A release cancelled while it waits for the watchdog's renewal in flight (which holds the
/// lease) still happens once the renewal is answered, and nothing renews the lease after it.
#[tokio::test]
async fn releases_cancelled_behind_a_renewal_in_flight_still_release() {
    let proxy = Proxy::start().await;
    let lease = Duration::from_secs(3);
    let client = LockClient::builder(proxy.url()).default_lease(lease).connect().await.unwrap();
    let names: Vec<String> = (0..200).map(|_| unique("release-behind-renewal")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(client.try_lock(name).await.unwrap().unwrap());
    }

    // The watchdog's next round trip is the renewal of all of them (a third of the lease in).
    proxy.stall();
    assert!(eventually(Duration::from_secs(30), || std::future::ready(proxy.held_back("EVALSHA"))).await);
    for guard in guards {
        let _ = tokio::time::timeout(Duration::from_micros(1), guard.release()).await;
    }
    proxy.resume();

    assert!(all_released(&client, &names, lease / 2).await, "keys left behind or leases still watched");
}
