//! Lock-delay: a lease that ends without a release keeps the lock unavailable for the delay; a
//! release has none. The lock key itself outlives the lease by the delay, so the first attempt's
//! pipeline (which reads no other key) and other libraries' `SET NX` are refused too.

use std::time::Duration;

use crate::support::{client, eventually, exists, foreign_set_nx, lock_key, raw, unique};

/// What `inspect` shows of `name`.
async fn inspect(client: &lockkit::LockClient, name: &str) -> lockkit::LockInfo {
    let mut infos = client.inspect(name).await.unwrap();
    assert_eq!(infos.len(), 1, "{infos:?}");
    infos.remove(0)
}

const LEASE: Duration = Duration::from_millis(200);
const DELAY: Duration = Duration::from_secs(2);

/// A holder that "crashes": its fixed lease is never released, so it ends by expiry alone.
async fn crash_holding(client: &lockkit::LockClient, name: &str, delay: Option<Duration>) {
    let mut acquire = client.acquire(name).lease(LEASE);
    if let Some(delay) = delay {
        acquire = acquire.lock_delay(delay);
    }
    std::mem::forget(acquire.await.unwrap());
    let expired = eventually(Duration::from_secs(5), || async move { !inspect(client, name).await.held });
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

/// A plain grant's first attempt (on one Redis a pipeline that reads no delay key) is refused by
/// the crashed holder's lock key, which outlives its lease by the delay. On a name whose
/// lock-delay is set later, after cheap grants, the delay still holds, the refusal leaves it as
/// it was, and no later grant gets a fence below the crashed holder's.
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
    let info = inspect(&other, &name).await;
    assert!(!info.held && info.delay.is_some_and(|d| d > DELAY / 2), "the refusal left the delay as it was: {info:?}");
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

/// Another library's lock on the same key (`SET NX`, as redis-py or redsync take it) is refused
/// during the delay as well.
#[tokio::test]
async fn another_librarys_set_nx_is_refused_during_the_delay() {
    let crashed = client().await;
    let name = unique("delay-peer");

    crash_holding(&crashed, &name, Some(DELAY)).await;

    assert!(!foreign_set_nx(&mut raw().await, &name, "peer", 1000).await, "a peer's SET NX inside the delay");
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
