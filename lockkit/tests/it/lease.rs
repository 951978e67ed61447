//! Leases: expiry without a watchdog, renewal by the watchdog, and the loss signal.

use std::time::{Duration, Instant};

use futures_util::FutureExt;
use lockkit::{LeaseLoss, LockClient};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

use crate::support::{Proxy, client, client_with_lease, eventually, exists, lock_key, raw, unique};

#[tokio::test]
async fn a_fixed_lease_expires_and_frees_the_lock_without_a_watchdog() {
    let (holder, other) = (client().await, client().await);
    let name = unique("ttl");
    let guard = holder.acquire(&name).lease(Duration::from_millis(300)).await.unwrap();
    assert!(other.try_lock(&name).await.unwrap().is_none());

    let cause = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.unwrap();
    let successor = other.lock(&name, Duration::from_secs(5)).await.unwrap();

    assert_eq!(cause, LeaseLoss::Expired);
    assert!(guard.is_lost());
    assert!(successor.fence() > guard.fence());
    assert!(!guard.release().await.unwrap(), "the old holder no longer owns it");
    assert!(successor.release().await.unwrap());
}

#[tokio::test]
async fn the_watchdog_keeps_a_one_second_lease_held_for_five_seconds() {
    let holder = client_with_lease(Duration::from_secs(1)).await;
    let other = client().await;
    let mut conn = raw().await;
    let name = unique("watchdog");
    let guard = holder.try_lock(&name).await.unwrap().unwrap();

    tokio::time::sleep(Duration::from_secs(5)).await;

    let pttl: i64 = redis::cmd("PTTL").arg(lock_key(&name)).query_async(&mut conn).await.unwrap();
    assert!(pttl > 0 && pttl <= 1000, "renewed, still a 1 s lease: {pttl}");
    assert!(!guard.is_lost());
    assert!(other.try_lock(&name).await.unwrap().is_none());
    assert!(guard.release().await.unwrap());
    assert!(!exists(&mut conn, &lock_key(&name)).await);
}

/// Control for the test above: without the watchdog the same lease is gone long before 5 s.
#[tokio::test]
async fn control_a_fixed_one_second_lease_is_gone_after_five_seconds() {
    let holder = client().await;
    let mut conn = raw().await;
    let name = unique("no-watchdog");
    let guard = holder.acquire(&name).lease(Duration::from_secs(1)).await.unwrap();

    tokio::time::sleep(Duration::from_secs(2)).await;

    assert!(!exists(&mut conn, &lock_key(&name)).await);
    assert!(guard.is_lost());
}

async fn lost_after_outside_interference(interfere: redis::Cmd) -> (LeaseLoss, Duration) {
    let lease = Duration::from_secs(3);
    let holder = client_with_lease(lease).await;
    let mut conn = raw().await;
    let name = unique("interfered");
    let guard = holder.try_lock(&name).await.unwrap().unwrap();
    let acquired = Instant::now();

    let _: () = interfere.clone().arg(lock_key(&name)).query_async(&mut conn).await.unwrap_or(());
    let cause = tokio::time::timeout(lease, guard.lost()).await.expect("lost() must fire within the lease");

    assert!(guard.is_lost());
    assert!(guard.ensure_held().unwrap_err().is_lost());
    assert!(!guard.release().await.unwrap());
    (cause, acquired.elapsed())
}

#[tokio::test]
async fn lost_fires_before_the_local_deadline_when_the_key_is_deleted() {
    let (cause, after) = lost_after_outside_interference(redis::cmd("DEL")).await;

    assert_eq!(cause, LeaseLoss::Gone, "reported by a renewal, not by the deadline ({after:?})");
}

#[tokio::test]
async fn lost_fires_before_the_local_deadline_when_the_key_is_overwritten() {
    let mut overwrite = redis::cmd("EVAL");
    overwrite.arg("return redis.call('SET', KEYS[1], 'intruder', 'PX', 60000)").arg(1);
    let (cause, _) = lost_after_outside_interference(overwrite).await;

    assert_eq!(cause, LeaseLoss::Gone);
}

#[tokio::test]
async fn extend_moves_a_fixed_lease_and_fails_once_it_is_lost() {
    let holder = client().await;
    let mut conn = raw().await;
    let name = unique("extend");
    let mut guard = holder.acquire(&name).lease(Duration::from_millis(500)).await.unwrap();

    guard.extend(Duration::from_secs(20)).await.unwrap();
    let pttl: i64 = redis::cmd("PTTL").arg(lock_key(&name)).query_async(&mut conn).await.unwrap();
    assert!(pttl > 10_000, "{pttl}");

    let _: () = redis::cmd("DEL").arg(lock_key(&name)).query_async(&mut conn).await.unwrap();
    let err = guard.extend(Duration::from_secs(20)).await.unwrap_err();
    assert!(err.is_lost());
    assert_eq!(guard.loss(), Some(LeaseLoss::Gone));
}

/// Fifty held locks renew in shared round trips, not one round trip per lock per tick.
#[tokio::test]
async fn renewals_of_many_locks_are_batched() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _recorder = metrics::set_default_local_recorder(&recorder);
    let holder = client_with_lease(Duration::from_millis(600)).await;
    let mut guards = Vec::new();
    for _ in 0..50 {
        guards.push(holder.try_lock(&unique("batched")).await.unwrap().unwrap());
    }

    tokio::time::sleep(Duration::from_millis(1500)).await;

    let renewed = counter(&snapshotter, "lockkit_renewals_total", Some("renewed"));
    let round_trips = counter(&snapshotter, "lockkit_renewal_round_trips_total", None);
    assert!(renewed >= 100, "every lock renewed at least twice: {renewed}");
    assert!(round_trips * 10 <= renewed, "{round_trips} round trips for {renewed} renewals");
    for guard in guards {
        assert!(!guard.is_lost());
        assert!(guard.release().await.unwrap());
    }
}

/// The sum of the counter `name` (with the label value `outcome`, if given) recorded since the
/// last snapshot (a snapshot drains counters).
fn counter(snapshotter: &Snapshotter, name: &str, outcome: Option<&str>) -> u64 {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == name)
        .filter(|(key, ..)| outcome.is_none_or(|o| key.key().labels().any(|l| l.value() == o)))
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum()
}

/// A pause (GC, swap) leaves one lease nearly expired when the watchdog next runs, and it
/// shares a renewal batch with a healthy lease; the batch's answer arrives after the nearly
/// expired lease's deadline. That lease is lost, and only it: the healthy one is renewed by that
/// same answer, with no renewal error. (The watchdog used to give up on the whole batch at the
/// earliest deadline in it.)
#[tokio::test(flavor = "current_thread")]
async fn a_nearly_expired_lease_does_not_fail_the_renewals_of_its_batch() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _recorder = metrics::set_default_local_recorder(&recorder);
    let proxy = Proxy::start().await;
    let client = LockClient::builder(proxy.url())
        .connections(1)
        .default_lease(Duration::from_secs(6))
        .command_timeout(Duration::from_secs(30))
        .connect()
        .await
        .unwrap();
    let healthy = client.try_lock(&unique("batch-healthy")).await.unwrap().expect("free");
    let mut nearly = client.try_lock(&unique("batch-nearly")).await.unwrap().expect("free");
    nearly.extend(Duration::from_millis(1200)).await.unwrap();

    // Every request from now on waits in the proxy. The pause blocks the runtime, so the watchdog
    // next runs when `nearly` has about 140 ms left and `healthy` is due: one batch for both.
    proxy.stall();
    std::thread::sleep(Duration::from_millis(1050));
    assert!(eventually(Duration::from_secs(30), || std::future::ready(proxy.held_back("EVAL"))).await);
    assert_eq!(nearly.lost().await, LeaseLoss::Expired);
    // Past any timer armed for that deadline, then the answer comes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = healthy.remaining();
    proxy.resume();

    assert!(eventually(Duration::from_secs(30), || std::future::ready(healthy.remaining() > before)).await);
    // (A snapshot drains the counters: read once.)
    assert_eq!(counter(&snapshotter, "lockkit_renewals_total", Some("error")), 0, "no renewal failed");
    assert!(!healthy.is_lost());
    assert!(healthy.release().await.unwrap());
}

/// The holder's thread is blocked past the lease (a GC pause, swap, a blocking call): the very
/// next check reports the loss, without waiting for the watchdog to run.
#[tokio::test(flavor = "current_thread")]
async fn a_blocked_holder_sees_its_loss_on_its_next_check() {
    let holder = client_with_lease(Duration::from_millis(300)).await;
    let guard = holder.try_lock(&unique("blocked-watched")).await.unwrap().unwrap();

    std::thread::sleep(Duration::from_millis(400));

    assert!(guard.is_lost(), "no await since the pause: only the local deadline can tell");
    assert_eq!(guard.loss(), Some(LeaseLoss::Expired));
    assert!(guard.ensure_held().unwrap_err().is_lost());
    assert_eq!(guard.lost().now_or_never(), Some(LeaseLoss::Expired));
}

/// `remaining()` never promises more than the server's own TTL, is renewed by the watchdog, and
/// drops to zero with the loss.
#[tokio::test(flavor = "current_thread")]
async fn remaining_stays_within_the_servers_ttl_and_is_zero_once_lost() {
    let lease = Duration::from_millis(600);
    let holder = client_with_lease(lease).await;
    let mut conn = raw().await;
    let name = unique("remaining");
    let guard = holder.try_lock(&name).await.unwrap().unwrap();

    for _ in 0..4 {
        // Redis' expiry, read after `remaining()`, is at least the deadline promised then (a
        // renewal in between only moves it later); PTTL truncates to whole milliseconds.
        let remaining = guard.remaining();
        let asked = Instant::now();
        let pttl: u64 = redis::cmd("PTTL").arg(lock_key(&name)).query_async(&mut conn).await.unwrap();
        let redis_expiry = asked.elapsed() + Duration::from_millis(pttl + 1);
        assert!(remaining > Duration::ZERO && remaining < lease, "{remaining:?}");
        assert!(remaining <= redis_expiry, "{remaining:?} promised, Redis expires it within {redis_expiry:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    std::thread::sleep(lease);
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(guard.is_lost());
}

/// `lost()` watches the local deadline itself: here it is the first to look after the pause.
#[tokio::test(flavor = "current_thread")]
async fn lost_fires_on_the_local_deadline_by_itself() {
    let holder = client().await;
    let guard = holder.acquire(&unique("blocked-fixed")).lease(Duration::from_millis(300)).await.unwrap();
    let lost = guard.lost();

    std::thread::sleep(Duration::from_millis(400));

    assert_eq!(lost.now_or_never(), Some(LeaseLoss::Expired));
    assert!(guard.is_lost());
}

/// A grant whose answer arrives after the lease it granted has run out is of no use: lockkit
/// undoes it and reports a retryable error instead of handing out a guard that is already lost.
#[tokio::test]
async fn a_grant_answered_after_its_lease_ran_out_is_refused() {
    let proxy = Proxy::start().await;
    let client = LockClient::builder(proxy.url()).connections(1).connect().await.unwrap();
    let name = unique("late-grant");
    let lease = Duration::from_millis(500);
    // The connection is up (and the release script loaded) before the stall.
    assert!(client.try_lock(&name).await.unwrap().unwrap().release().await.unwrap());

    proxy.stall();
    let attempt = tokio::spawn({
        let (client, name) = (client.clone(), name.clone());
        async move { client.acquire(&name).lease(lease).await }
    });
    // A first attempt of the plain lock is one pipeline, sent whole: held back once its last
    // command (`INCR` of the fence) is.
    assert!(eventually(Duration::from_secs(30), || std::future::ready(proxy.held_back("INCR"))).await);
    tokio::time::sleep(lease + Duration::from_millis(100)).await;
    proxy.resume();

    let err = attempt.await.unwrap().expect_err("the grant came too late to be used");
    assert!(err.is_unavailable() && err.is_retryable(), "{err}");
    assert_eq!(client.held_leases(), 0);
}
