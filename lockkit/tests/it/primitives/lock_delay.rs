//! Lock-delay: a lease that ends without a release keeps the lock unavailable for the delay; a
//! release has none.

use std::time::Duration;

use crate::support::{client, eventually, exists, lock_key, raw, unique};

const LEASE: Duration = Duration::from_millis(200);
const DELAY: Duration = Duration::from_secs(2);

/// A holder that "crashes": its fixed lease is never released, so it ends by expiry alone.
async fn crash_holding(client: &lockkit::LockClient, name: &str, delay: Option<Duration>) {
    let mut acquire = client.acquire(name).lease(LEASE);
    if let Some(delay) = delay {
        acquire = acquire.lock_delay(delay);
    }
    std::mem::forget(acquire.await.unwrap());
    let key = lock_key(name);
    let expired = eventually(Duration::from_secs(5), || {
        let key = key.clone();
        async move { !exists(&mut raw().await, &key).await }
    });
    assert!(expired.await, "the lease ends on the server");
}

#[tokio::test]
async fn an_expired_holder_leaves_the_lock_delayed_and_a_release_does_not() {
    let (crashed, other) = (client().await, client().await);
    let name = unique("delay");

    crash_holding(&crashed, &name, Some(DELAY)).await;

    assert!(other.try_lock(&name).await.unwrap().is_none(), "delayed although the lease is over");
    let next = other.lock(&name, Duration::from_secs(10)).await.expect("free once the delay is over");
    assert!(next.attempts() >= 2, "had to wait out the delay");
    assert!(next.release().await.unwrap());

    // A release has no delay.
    let released = unique("delay-release");
    let guard = crashed.acquire(&released).lock_delay(DELAY).await.unwrap();
    assert!(guard.release().await.unwrap());
    let again = other.try_lock(&released).await.unwrap().expect("no delay after a release");
    again.release().await.unwrap();
    assert!(!exists(&mut raw().await, &format!("{}:delay", lock_key(&released))).await);
}

/// A plain grant takes the lock with `SET NX` before it looks for a delay (on one Redis, a first
/// attempt even runs no script: the delay is seen only after the grant); on a name whose
/// lock-delay is set later, after cheap grants, the delay still holds, and the refused grant is
/// undone: no lock key left, and no later grant gets a fence below the crashed holder's.
#[tokio::test]
async fn a_lock_delay_set_later_on_a_name_is_still_honoured() {
    let (crashed, other) = (client().await, client().await);
    let name = unique("delay-later");
    for _ in 0..3 {
        assert!(other.try_lock(&name).await.unwrap().expect("free").release().await.unwrap());
    }
    let fence_key = format!("{}:fence", lock_key(&name));
    let fence = || async { redis::cmd("GET").arg(&fence_key).query_async::<u64>(&mut raw().await).await.unwrap() };

    crash_holding(&crashed, &name, Some(DELAY)).await;
    let before = fence().await;

    assert!(other.try_lock(&name).await.unwrap().is_none(), "delayed although the lease is over");
    assert!(!exists(&mut raw().await, &lock_key(&name)).await, "the refused grant left its lock key");
    let next = other.lock(&name, Duration::from_secs(10)).await.expect("free once the delay is over");
    assert!(next.fence().get() > before, "fence {} after the crashed holder's {before}", next.fence());
    assert!(next.release().await.unwrap());
}

#[tokio::test]
async fn a_renewed_lease_keeps_its_delay_armed() {
    let client = crate::support::client_with_lease(Duration::from_millis(300)).await;
    let other = crate::support::client().await;
    let name = unique("delay-renewed");
    let guard = client.acquire(&name).lock_delay(DELAY).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!guard.is_lost(), "renewed by the watchdog");
    assert!(other.try_lock(&name).await.unwrap().is_none());
    assert!(guard.release().await.unwrap());
    other.try_lock(&name).await.unwrap().expect("released: no delay").release().await.unwrap();
}

#[tokio::test]
async fn a_lock_delay_on_another_primitive_is_refused() {
    let client = client().await;
    let err = client.semaphore(&unique("delay-sem"), 2).lock_delay(DELAY).await.unwrap_err();
    assert_eq!(err.kind(), lockkit::ErrorKind::Config);
}

/// Control: without the lock-delay, the same crash leaves the lock free at once, so the check
/// above would catch a missing delay.
#[tokio::test]
async fn control_without_a_delay_the_lock_is_free_right_after_the_expiry() {
    let (crashed, other) = (client().await, client().await);
    let name = unique("delay-control");

    crash_holding(&crashed, &name, None).await;

    let next = other.try_lock(&name).await.unwrap().expect("no delay configured");
    next.release().await.unwrap();
}
