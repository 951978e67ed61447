//! Redis Sentinel with a forced failover under held locks, on a master, a replica and three
//! Sentinels that each test starts (`sentinel_servers`). The failover loses one grant (the replica
//! never got it), as asynchronous replication can:
//! - the client follows the new master: acquire and release work there;
//! - exclusion is bounded by the documented rule: the lock whose grant was lost can be taken by
//!   another client, and its first holder learns from the new master that it is gone;
//! - fences granted after the failover are above every fence granted before it, so a store that
//!   keeps the highest fence refuses the deposed holder (control: without the fence floor, the
//!   lost fence is handed out again);
//! - a waiter blocked before the failover is woken by a release on the new master;
//! - a client leaves a demoted master that is still up.

use std::time::Duration;

use lockkit::{BackendKind, Fence, LeaseLoss, LockClient, Unprotected};

use crate::{
    sentinel_servers::SentinelSet,
    servers::RedisServer,
    support::{eventually, unique},
};

/// A store that accepts a claim only with a fence above every fence it has seen, as a fenced
/// store does (`fence < $t`, then `fence = $t`).
#[derive(Default)]
struct FencedStore {
    highest: u64,
}

impl FencedStore {
    fn claim(&mut self, fence: Fence) -> bool {
        let accepted = fence.get() > self.highest;
        self.highest = self.highest.max(fence.get());
        accepted
    }
}

/// Whether `server` has a subscriber on `channel`, waiting (60 s at most) for one to appear.
async fn subscribed(server: &RedisServer, channel: &str) -> bool {
    eventually(Duration::from_secs(60), async || {
        let (_, subscribers): (String, i64) =
            redis::cmd("PUBSUB").arg("NUMSUB").arg(channel).query_async(&mut server.conn().await).await.unwrap();
        subscribers > 0
    })
    .await
}

fn keys(name: &str) -> (String, String) {
    (format!("{{lockkit:{name}}}"), format!("{{lockkit:{name}}}:fence"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_is_followed_fences_stay_ahead_and_waiters_wake() {
    // Arrange: `lost` is granted before the failover and its grant never reaches the replica;
    // `kept` is granted and replicated, and a waiter queues for it.
    let mut set = SentinelSet::start().await;
    let url = set.url();
    let connect = |lease| LockClient::builder(&url).default_lease(lease).wake_safety_interval(Duration::from_secs(600));
    let first = connect(Duration::from_secs(3)).connect().await.unwrap();
    assert_eq!(first.backend(), BackendKind::RedisSentinel);
    let (lost, kept) = (unique("sentinel-lost"), unique("sentinel-kept"));
    let lost_guard = first.lock(&lost, Duration::from_secs(5)).await.unwrap();
    let mut store = FencedStore::default();
    assert!(store.claim(lost_guard.fence()));
    // A long explicit lease: the waiter's sleep is capped by the holder's TTL, so only a wake-up
    // can bring it in before its wait ends.
    let kept_guard = first.acquire(&kept).lease(Duration::from_secs(600)).await.unwrap();
    let waiter_client = connect(Duration::from_secs(30)).connect().await.unwrap();
    let waiter = tokio::spawn({
        let kept = kept.clone();
        async move { waiter_client.lock(&kept, Duration::from_secs(300)).await }
    });
    let (lock_key, fence_key) = keys(&lost);
    let channel = format!("{{lockkit:{kept}}}:released");
    assert!(subscribed(&set.master, &channel).await, "the waiter subscribes on the master");
    set.lose_on_replica(&lock_key, &fence_key).await;

    // Act: a forced failover, and the old master gone for good (the wake-up connection must move).
    set.failover().await;
    set.master.kill();

    // Assert: another client takes the lock whose grant was lost, with a fence above the lost one.
    let second = connect(Duration::from_secs(3)).connect().await.unwrap();
    let taken = second.lock(&lost, Duration::from_secs(60)).await.unwrap();
    assert!(
        taken.fence() > lost_guard.fence(),
        "fence {} after the failover, {} before",
        taken.fence(),
        lost_guard.fence()
    );
    assert!(store.claim(taken.fence()));
    assert!(!store.claim(lost_guard.fence()), "the store refuses the deposed holder");
    // The deposed holder hears it from the new master (Gone), not only from its own deadline.
    assert_eq!(lost_guard.lost().await, LeaseLoss::Gone);

    // The first client follows too: acquire and release on the new master.
    let fresh = first.lock(&unique("sentinel-fresh"), Duration::from_secs(60)).await.unwrap();
    assert!(fresh.release().await.unwrap());
    // The replicated lock survived, and its release wakes the waiter queued before the failover,
    // whose wake-up subscription moved to the new master (without that it would only poll).
    assert!(subscribed(&set.replica, &channel).await, "the waiter's subscription follows the master");
    assert!(!kept_guard.is_lost());
    assert!(kept_guard.release().await.unwrap());
    let woken = waiter.await.unwrap().expect("the waiter gets the lock once it is released");
    assert!(woken.release().await.unwrap());
    taken.release().await.unwrap();
}

/// Control: the same lost grant and failover without the fence floor. The new master's counter
/// is one behind, so the next grant hands out the lost fence again and the store refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_fence_floor_a_lost_grant_s_fence_is_handed_out_again() {
    let set = SentinelSet::start().await;
    let connect = || {
        LockClient::builder(set.url())
            .default_lease(Duration::from_secs(3))
            .unprotected(Unprotected::SentinelFenceFloor)
    };
    let first = connect().connect().await.unwrap();
    let name = unique("sentinel-no-floor");
    let lost_guard = first.lock(&name, Duration::from_secs(5)).await.unwrap();
    let mut store = FencedStore::default();
    assert!(store.claim(lost_guard.fence()));
    let (lock_key, fence_key) = keys(&name);
    set.lose_on_replica(&lock_key, &fence_key).await;

    set.failover().await;

    let second = connect().connect().await.unwrap();
    let taken = second.lock(&name, Duration::from_secs(60)).await.unwrap();
    assert_eq!(taken.fence(), lost_guard.fence(), "without the floor the lost fence comes back");
    assert!(!store.claim(taken.fence()), "and the store refuses the new holder's claim");
    taken.release().await.unwrap();
}

/// A client whose connections are on the master when it is failed over, and which stays up (a
/// demoted master keeps answering, and accepts writes until the Sentinels reconfigure it): the
/// client's next lock lands on the promoted replica, moved there by `+switch-master` or by the
/// old master's `READONLY`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_leaves_a_demoted_master_for_the_promoted_one() {
    let set = SentinelSet::start().await;
    let client = LockClient::connect(&set.url()).await.unwrap();
    let before = client.lock(&unique("sentinel-before"), Duration::from_secs(5)).await.unwrap();
    assert!(before.release().await.unwrap());

    set.failover().await;

    let name = unique("sentinel-after");
    let after = client.lock(&name, Duration::from_secs(60)).await.unwrap();
    let on_promoted: bool =
        redis::cmd("EXISTS").arg(keys(&name).0).query_async(&mut set.replica.conn().await).await.unwrap();
    assert!(on_promoted, "the lock was granted by the promoted replica");
    assert!(after.release().await.unwrap());
}
