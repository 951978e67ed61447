//! The reentrant lock: re-entry by the same owner with the same fence, a count per owner, free at
//! zero; other owners wait; a release by a grant that is no longer the holder is refused.

use std::time::Duration;

use super::leftover_keys;
use crate::support::{client, raw, unique};

async fn grants(name: &str) -> u64 {
    redis::cmd("ZCARD").arg(format!("{{lockkit:{name}}}:grants")).query_async(&mut raw().await).await.unwrap()
}

#[tokio::test]
async fn the_owner_reenters_and_the_lock_is_free_when_the_count_reaches_zero() {
    let (a, b) = (client().await, client().await);
    let name = unique("reentrant");

    let first = a.reentrant(&name, "owner-a").await.unwrap();
    let second = a.reentrant(&name, "owner-a").await.unwrap();
    // Another process with the same owner id re-enters too.
    let third = b.reentrant(&name, "owner-a").await.unwrap();
    assert_eq!(grants(&name).await, 3);
    let fence = first.fence();
    assert_eq!(second.fence(), fence, "the fence stays the same for re-entries");
    assert_eq!(third.fence(), first.fence());

    assert!(b.reentrant(&name, "owner-b").await.unwrap_err().is_timeout(), "another owner waits");
    assert!(b.try_lock(&name).await.unwrap().is_none(), "a plain lock of the name waits too");
    assert!(third.release().await.unwrap());
    assert!(first.release().await.unwrap());
    assert_eq!(grants(&name).await, 1);
    assert!(b.reentrant(&name, "owner-b").await.unwrap_err().is_timeout(), "count 1: still held");

    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move { b.reentrant(&name, "owner-b").wait(Duration::from_secs(10)).await })
    };
    assert!(second.release().await.unwrap());
    let next = waiter.await.unwrap().expect("free at count zero");
    assert!(next.fence() > fence);
    assert!(next.release().await.unwrap());
    assert!(leftover_keys(&mut raw().await, &name).await.is_empty(), "nothing left behind");
}

#[tokio::test]
async fn a_release_by_a_grant_that_no_longer_holds_is_refused() {
    let (a, b) = (client().await, client().await);
    let name = unique("reentrant-stale");
    let stale = a.reentrant(&name, "owner-a").lease(Duration::from_millis(150)).await.unwrap();
    let holder = b.reentrant(&name, "owner-b").wait(Duration::from_secs(5)).await.unwrap();

    assert!(!stale.release().await.unwrap(), "the stale grant's release is refused");
    assert!(a.reentrant(&name, "owner-a").await.unwrap_err().is_timeout(), "owner-b still holds it");
    assert!(holder.release().await.unwrap());
}

#[tokio::test]
async fn the_watchdog_renews_every_grant() {
    let a = crate::support::client_with_lease(Duration::from_millis(300)).await;
    let name = unique("reentrant-renewed");
    let outer = a.reentrant(&name, "owner-a").await.unwrap();
    let inner = a.reentrant(&name, "owner-a").await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!outer.is_lost() && !inner.is_lost());
    assert_eq!(grants(&name).await, 2);
    inner.release().await.unwrap();
    outer.release().await.unwrap();
}

/// Control: the plain lock refuses the same owner's second acquire, so the re-entry assertions
/// above do test re-entry, and a second owner is refused by the reentrant lock for the same
/// reason the plain lock refuses everyone.
#[tokio::test]
async fn control_the_plain_lock_does_not_reenter() {
    let a = client().await;
    let name = unique("reentrant-control");
    let first = a.try_lock(&name).await.unwrap().unwrap();
    assert!(a.try_lock(&name).await.unwrap().is_none());
    first.release().await.unwrap();
}
