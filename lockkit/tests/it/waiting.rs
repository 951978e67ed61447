//! Waiting for a held lock: woken by the release, not by polling; bounded by the wait.

use std::time::Duration;

use futures_util::StreamExt;
use lockkit::LockClient;

use redis::aio::MultiplexedConnection;

use crate::support::{Proxy, client, eventually, lock_key, raw, redis_url, unique};

/// How long the waiters below wait: far longer than a wake-up takes, and far shorter than the
/// holder's lease (30 s) or the safety interval (60 s), so only a release's wake-up ends the wait
/// before it runs out.
const WAIT: Duration = Duration::from_secs(20);

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
        tokio::spawn(async move { waiter_client.lock(&name, WAIT).await })
    };
    // The waiter's wait has begun once Redis has its subscription: from then on, hold 700 ms.
    let (conn, channel) = (raw().await, format!("{}:released", lock_key(&name)));
    let subscribed = eventually(Duration::from_secs(10), || subscribed(conn.clone(), channel.clone()));
    assert!(subscribed.await, "the waiter subscribes");
    tokio::time::sleep(Duration::from_millis(700)).await;

    held.release().await.unwrap();
    let guard = waiter.await.unwrap().expect("woken by the release");

    // Round trips: the first try, the retry right after subscribing, the one after the wake-up.
    // (An unwoken waiter would also take the lock in 3, by its last try at the end of its wait.)
    assert_eq!(guard.attempts(), 3);
    assert!(guard.waited() < WAIT, "not woken: took the lock at the end of its wait");
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

/// A release that nobody waits for publishes no wake-up (the cut that makes a plain pair cheap):
/// the release's message, had there been one, would reach a listener before a marker published
/// after the release returned.
#[tokio::test]
async fn a_release_that_nobody_waits_for_publishes_nothing() {
    let client = client().await;
    let name = unique("unwaited");
    let channel = format!("{}:released", lock_key(&name));
    let mut listener = redis::Client::open(redis_url()).unwrap().get_async_pubsub().await.unwrap();
    listener.subscribe(&channel).await.unwrap();

    let guard = client.try_lock(&name).await.unwrap().unwrap();
    assert!(guard.release().await.unwrap());
    redis::cmd("PUBLISH").arg(&channel).arg("marker").query_async::<()>(&mut raw().await).await.unwrap();

    let first: String = listener.on_message().next().await.unwrap().get_payload().unwrap();
    assert_eq!(first, "marker", "the release published a wake-up nobody waited for");
}

/// Two waiters of one process: a release wakes one of them, and the other sleeps on. When the
/// first releases in turn, the second must be woken by that release too, although nobody
/// attempted between the two releases: the mark its own attempt left still announces it. Neither
/// the holder's lease (30 s) nor the safety interval (60 s) could wake it within its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_waiter_of_a_process_is_woken_by_the_next_release() {
    let holder = client().await;
    let waiters =
        LockClient::builder(redis_url()).wake_safety_interval(Duration::from_secs(60)).connect().await.unwrap();
    let name = unique("second-waiter");
    let held = holder.try_lock(&name).await.unwrap().unwrap();
    let [first, second] = [(), ()].map(|()| {
        let (client, name) = (waiters.clone(), name.clone());
        tokio::spawn(async move {
            let guard = client.lock(&name, WAIT).await?;
            let woken = (guard.attempts(), guard.waited());
            guard.release().await?;
            Ok::<_, lockkit::Error>(woken)
        })
    });
    // Each waiter announces the attempt after its subscription (its first, made before it
    // listens, need not): two in all, after which both sleep.
    let mark = format!("{}:waiting", lock_key(&name));
    let announced = eventually(Duration::from_secs(10), || {
        let mark = mark.clone();
        async move { redis::cmd("GET").arg(&mark).query_async::<Option<u64>>(&mut raw().await).await.unwrap() >= Some(2) }
    });
    assert!(announced.await, "both waiters announced themselves");

    held.release().await.unwrap();

    for (attempts, waited) in [first.await.unwrap().expect("woken"), second.await.unwrap().expect("woken in turn")] {
        // The last try of an unwoken waiter, at the end of its wait, would find the lock free too.
        assert!(waited < WAIT, "not woken: took the lock at the end of its wait");
        assert_eq!(attempts, 3, "woken once, by a release");
    }
}

/// A reader kept out by a plain lock of the same name announces itself too, so the plain lock's
/// release wakes it (the plain release publishes only for announced waiters).
#[tokio::test]
async fn a_reader_kept_out_by_a_plain_lock_is_woken_by_its_release() {
    let holder = client().await;
    let reader =
        LockClient::builder(redis_url()).wake_safety_interval(Duration::from_secs(60)).connect().await.unwrap();
    let name = unique("plain-then-read");
    let held = holder.try_lock(&name).await.unwrap().unwrap();
    let waiting = {
        let name = name.clone();
        tokio::spawn(async move { reader.read_write(&name).read().wait(WAIT).await })
    };
    let mark = format!("{}:waiting", lock_key(&name));
    let announced = eventually(Duration::from_secs(10), || {
        let mark = mark.clone();
        async move { redis::cmd("GET").arg(&mark).query_async::<Option<u64>>(&mut raw().await).await.unwrap() >= Some(2) }
    });
    assert!(announced.await, "the reader announced itself after subscribing");

    held.release().await.unwrap();

    let share = waiting.await.unwrap().expect("woken by the plain lock's release");
    assert!(share.waited() < WAIT, "not woken: took the share at the end of its wait");
    assert_eq!(share.attempts(), 3);
    share.release().await.unwrap();
}

/// Whether anyone is subscribed to `channel` (`PUBSUB NUMSUB`).
async fn subscribed(mut conn: MultiplexedConnection, channel: String) -> bool {
    let (_, count): (String, u64) =
        redis::cmd("PUBSUB").arg("NUMSUB").arg(channel).query_async(&mut conn).await.unwrap();
    count > 0
}
