//! Cancellation: dropped guards and dropped acquire futures leave no lock behind.

use std::time::Duration;

use crate::support::{client, eventually, exists, lock_key, raw, unique};

#[tokio::test]
async fn dropping_a_guard_releases_in_the_background() {
    let client = client().await;
    let mut conn = raw().await;
    let name = unique("dropped-guard");
    let guard = client.try_lock(&name).await.unwrap().unwrap();
    assert!(exists(&mut conn, &lock_key(&name)).await);

    drop(guard);

    assert!(eventually(Duration::from_secs(5), || { let mut c = conn.clone(); let k = lock_key(&name); async move { !exists(&mut c, &k).await } }).await);
    assert_eq!(client.held_leases(), 0);
}

#[tokio::test]
async fn dropped_acquire_futures_leave_no_lock_behind() {
    let client = client().await;
    let mut conn = raw().await;
    let name = unique("dropped-acquire");
    let mut cancelled = 0;

    // Cancel acquires at varied points of their round trip: some before the script was sent,
    // some after Redis granted the lock but before the reply arrived.
    for i in 0..300u64 {
        let deadline = Duration::from_micros(20 + (i * 37) % 900);
        match tokio::time::timeout(deadline, client.try_lock(&name)).await {
            Ok(result) => drop(result.unwrap()),
            Err(_) => cancelled += 1,
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
