//! Waiting for a held lock: woken by the release, not by polling; bounded by the wait.

use std::time::Duration;

use lockkit::LockClient;

use redis::aio::MultiplexedConnection;

use crate::support::{Proxy, client, eventually, lock_key, raw, redis_url, unique};

#[tokio::test]
async fn a_waiter_wakes_on_release_without_polling() {
    // Neither a TTL nor the safety interval could wake the waiter within its wait: only the
    // release's wake-up can.
    let holder = client().await;
    let waiter_client =
        LockClient::builder(redis_url()).wake_safety_interval(Duration::from_secs(60)).connect().await.unwrap();
    let name = unique("wake");
    let held = holder.try_lock(&name).await.unwrap().unwrap();
    let waiter = {
        let name = name.clone();
        tokio::spawn(async move { waiter_client.lock(&name, Duration::from_secs(20)).await })
    };
    // The waiter's wait has begun once Redis has its subscription: from then on, hold 700 ms.
    let (conn, channel) = (raw().await, format!("{}:released", lock_key(&name)));
    let subscribed = eventually(Duration::from_secs(10), || subscribed(conn.clone(), channel.clone()));
    assert!(subscribed.await, "the waiter subscribes");
    tokio::time::sleep(Duration::from_millis(700)).await;

    held.release().await.unwrap();
    let guard = waiter.await.unwrap().expect("woken by the release");

    // Round trips: the first try, the retry right after subscribing, the one after the wake-up.
    assert_eq!(guard.attempts(), 3);
    assert!(
        guard.waited() >= Duration::from_millis(700),
        "waited {:?}, counted from before it subscribed",
        guard.waited()
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_waiter_takes_over_when_the_holders_lease_runs_out() {
    // Expiry publishes nothing: the waiter sleeps for the holder's remaining TTL.
    let client = client().await;
    let name = unique("ttl-wait");
    let _held = client.acquire(&name).lease(Duration::from_millis(400)).await.unwrap();

    let guard = client.lock(&name, Duration::from_secs(10)).await.unwrap();

    assert!(guard.attempts() <= 4, "{} attempts", guard.attempts());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn waiting_gives_up_with_a_timeout_error() {
    let client = client().await;
    let name = unique("timeout");
    let held = client.try_lock(&name).await.unwrap().unwrap();

    let err = client.lock(&name, Duration::from_millis(300)).await.unwrap_err();

    assert!(err.is_timeout() && err.is_retryable());
    assert!(client.try_lock(&name).await.unwrap().is_none());
    assert!(held.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_are_served_one_after_another() {
    let client = client().await;
    let name = unique("queue");
    let held = client.try_lock(&name).await.unwrap().unwrap();
    let waiters: Vec<_> = (0..10)
        .map(|_| {
            let (client, name) = (client.clone(), name.clone());
            tokio::spawn(async move {
                let guard = client.lock(&name, Duration::from_secs(30)).await.unwrap();
                let fence = guard.fence();
                assert!(guard.release().await.unwrap());
                fence
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;

    held.release().await.unwrap();
    let mut fences = Vec::new();
    for waiter in waiters {
        fences.push(waiter.await.unwrap());
    }

    fences.sort();
    fences.dedup();
    assert_eq!(fences.len(), 10);
}

/// Pub/sub subscriptions that Redis never confirms (a stalled wake-up connection) cost polling,
/// not the wait: the waiter gives up when its own wait ends. Before, it first waited a fixed
/// second for the confirmation whatever its wait was; the bound below is that second, twenty
/// times the wait.
#[tokio::test]
async fn an_unconfirmed_subscription_does_not_stretch_the_wait() {
    let proxy = Proxy::start().await;
    // A long command timeout: the confirmation wait must be cut by the wait, not by this.
    let client = LockClient::builder(proxy.url()).command_timeout(Duration::from_secs(30)).connect().await.unwrap();
    let name = unique("unconfirmed");
    let held = client.try_lock(&name).await.unwrap().unwrap();
    proxy.swallow_subscribes();

    let started = std::time::Instant::now();
    let err = client.lock(&name, Duration::from_millis(50)).await.unwrap_err();

    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    assert!(held.release().await.unwrap());
}

/// Whether anyone is subscribed to `channel` (`PUBSUB NUMSUB`).
async fn subscribed(mut conn: MultiplexedConnection, channel: String) -> bool {
    let (_, count): (String, u64) =
        redis::cmd("PUBSUB").arg("NUMSUB").arg(channel).query_async(&mut conn).await.unwrap();
    count > 0
}
