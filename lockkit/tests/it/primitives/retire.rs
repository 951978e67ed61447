//! Fence counter hygiene: a counter is retired only while nothing uses its name, and hands back
//! the last fence, which re-seeds it if the name comes back.

use lockkit::{Fence, FenceRetirement};

use crate::support::{client, exists, raw, unique};

#[tokio::test]
async fn a_counter_is_retired_only_when_unused_and_reseeding_keeps_fences_increasing() {
    let client = client().await;
    let name = unique("retire");
    let guard = client.try_lock(&name).await.unwrap().unwrap();
    let last = guard.fence();

    assert_eq!(client.retire_fence(&name).await.unwrap(), FenceRetirement::InUse, "held: kept");
    guard.release().await.unwrap();
    let permit = client.semaphore(&name, 2).await.unwrap();
    assert_eq!(client.retire_fence(&name).await.unwrap(), FenceRetirement::InUse, "a permit: kept");
    permit.release().await.unwrap();
    let last = Fence::new(last.get() + 1);

    assert_eq!(client.retire_fence(&name).await.unwrap(), FenceRetirement::Retired { last });
    assert!(!exists(&mut raw().await, &format!("{{lockkit:{name}}}:fence")).await);
    assert_eq!(client.retire_fence(&name).await.unwrap(), FenceRetirement::Absent);

    // The name comes back: re-seeded from the last fence, grants keep increasing.
    client.ensure_fence_at_least(&name, last).await.unwrap();
    let again = client.try_lock(&name).await.unwrap().unwrap();
    assert!(again.fence() > last);
    again.release().await.unwrap();
}

/// Control: without the re-seed, a retired name's fences go backwards, which is what the
/// documented contract of `retire_fence` guards against.
#[tokio::test]
async fn control_without_reseeding_fences_go_backwards() {
    let client = client().await;
    let name = unique("retire-control");
    for _ in 0..3 {
        client.try_lock(&name).await.unwrap().unwrap().release().await.unwrap();
    }
    let FenceRetirement::Retired { last } = client.retire_fence(&name).await.unwrap() else { panic!("unused") };
    let again = client.try_lock(&name).await.unwrap().unwrap();
    assert!(again.fence() < last);
    again.release().await.unwrap();
}
