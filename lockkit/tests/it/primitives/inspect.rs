//! `inspect` per primitive: holders with the time left to each (server-timed), the fair queue in
//! order, permits out of the limit, a reentrant owner's grants, readers, the lock-delay left; and
//! tokens only ever as a short hash.

use std::time::Duration;

use lockkit::{HolderRole, LockClient, LockInfo, LockKind};

use crate::support::{client, eventually, exists, lock_key, raw, unique};

const LEASE: Duration = Duration::from_secs(20);

async fn inspect_one(client: &LockClient, name: &str) -> LockInfo {
    let mut infos = client.inspect(name).await.unwrap();
    assert_eq!(infos.len(), 1, "{infos:?}");
    infos.remove(0)
}

/// What `inspect` shows for a token: the first 8 hex digits of its SHA-1, computed by Redis.
async fn short_hash(token: &str) -> String {
    let sha: String = redis::cmd("EVAL")
        .arg("return redis.sha1hex(ARGV[1])")
        .arg(0)
        .arg(token)
        .query_async(&mut raw().await)
        .await
        .unwrap();
    sha[..8].to_owned()
}

fn assert_lease_left(ttl: Option<Duration>, most: Duration) {
    let ttl = ttl.expect("a time left");
    assert!(ttl > Duration::ZERO && ttl <= most, "{ttl:?} not in (0, {most:?}]");
}

#[tokio::test]
async fn a_plain_lock_shows_its_one_holder_by_hash_and_idle_after_release() {
    let client = client().await;
    let name = unique("inspect-plain");
    let guard = client.acquire(&name).lease(LEASE).await.unwrap();
    let token: String = redis::cmd("GET").arg(lock_key(&name)).query_async(&mut raw().await).await.unwrap();

    let info = inspect_one(&client, &name).await;

    assert_eq!(info.kind, LockKind::Plain);
    assert!(info.held);
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].role, HolderRole::Lock);
    assert_eq!(info.holders[0].id, short_hash(&token).await);
    assert!(!format!("{info:?}").contains(&token), "the token is never shown");
    assert_lease_left(info.holders[0].ttl, LEASE);
    assert_eq!(info.delay, None);

    guard.release().await.unwrap();
    let idle = inspect_one(&client, &name).await;
    assert_eq!(idle.kind, LockKind::Idle);
    assert!(idle.holders.is_empty() && idle.fence.is_some());
}

#[tokio::test]
async fn a_semaphore_shows_its_permits_out_of_the_limit_with_their_expiries() {
    let client = client().await;
    let name = unique("inspect-sem");
    let p1 = client.semaphore(&name, 3).lease(LEASE).await.unwrap();
    let p2 = client.semaphore(&name, 3).lease(Duration::from_secs(5)).await.unwrap();

    let info = inspect_one(&client, &name).await;

    assert_eq!(info.kind, LockKind::Semaphore);
    assert_eq!(info.permits, Some(3));
    assert_eq!(info.holders.len(), 2, "2 of 3 permits out");
    assert!(info.holders.iter().all(|h| h.role == HolderRole::Permit && h.id.len() == 8));
    assert_ne!(info.holders[0].id, info.holders[1].id);
    // Soonest expiry first: the 5 s permit, then the 20 s one.
    assert_lease_left(info.holders[0].ttl, Duration::from_secs(5));
    assert!(info.holders[1].ttl.unwrap() > Duration::from_secs(5));
    assert_lease_left(info.holders[1].ttl, LEASE);

    p1.release().await.unwrap();
    p2.release().await.unwrap();
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{}*", lock_key(&name))).query_async(&mut raw().await).await.unwrap();
    assert_eq!(keys, vec![format!("{}:fence", lock_key(&name))], "the limit goes with the last permit");
}

#[tokio::test]
async fn a_fair_lock_shows_its_holder_and_the_queue_in_order() {
    let client = client().await;
    let name = unique("inspect-fair");
    let holder = client.fair(&name).lease(LEASE).await.unwrap();
    let queue_timeout = Duration::from_secs(8);
    let mut waiters = Vec::new();
    for n in 1..=2 {
        let (waiter, waited) = (client.clone(), name.clone());
        waiters.push(tokio::spawn(async move {
            let guard = waiter.fair(&waited).queue_timeout(queue_timeout).wait(Duration::from_secs(30)).await.unwrap();
            guard.release().await.unwrap();
        }));
        let queued = eventually(Duration::from_secs(5), || {
            let (client, name) = (client.clone(), name.clone());
            async move { inspect_one(&client, &name).await.queue.len() == n }
        });
        assert!(queued.await);
    }

    let info = inspect_one(&client, &name).await;
    let tickets: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("{}:queue", lock_key(&name)))
        .arg(0)
        .arg(-1)
        .query_async(&mut raw().await)
        .await
        .unwrap();

    assert_eq!(info.kind, LockKind::Fair);
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].role, HolderRole::Lock);
    assert_lease_left(info.holders[0].ttl, LEASE);
    let ids: Vec<&str> = info.queue.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, vec![short_hash(&tickets[0]).await, short_hash(&tickets[1]).await], "head first");
    for waiter in &info.queue {
        assert!(waiter.deadline > Duration::ZERO && waiter.deadline <= queue_timeout, "{waiter:?}");
    }

    holder.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
}

#[tokio::test]
async fn a_reentrant_lock_shows_its_owner_and_each_grant() {
    let client = client().await;
    let name = unique("inspect-reentrant");
    let outer = client.reentrant(&name, "worker-7").lease(LEASE).await.unwrap();
    let inner = client.reentrant(&name, "worker-7").lease(LEASE).await.unwrap();

    let info = inspect_one(&client, &name).await;

    assert_eq!(info.kind, LockKind::Reentrant);
    assert!(info.held);
    assert_eq!(info.owner.as_deref(), Some("worker-7"));
    assert_eq!(info.holders.len(), 2, "count 2");
    for grant in &info.holders {
        assert_eq!(grant.role, HolderRole::Grant);
        assert_lease_left(grant.ttl, LEASE);
    }
    assert_eq!(info.fence, Some(outer.fence()));

    inner.release().await.unwrap();
    assert_eq!(inspect_one(&client, &name).await.holders.len(), 1, "count 1");
    outer.release().await.unwrap();
    assert_eq!(inspect_one(&client, &name).await.kind, LockKind::Idle);
}

#[tokio::test]
async fn a_read_write_lock_shows_its_readers_and_a_waiting_writer() {
    let client = client().await;
    let name = unique("inspect-rw");
    let r1 = client.read_write(&name).read().lease(LEASE).await.unwrap();
    let r2 = client.read_write(&name).read().lease(LEASE).await.unwrap();
    // A writer that finds readers marks itself as waiting (writer preference).
    assert!(client.read_write(&name).write().await.unwrap_err().is_timeout());

    let info = inspect_one(&client, &name).await;

    assert_eq!(info.kind, LockKind::ReadWrite);
    assert!(!info.held, "no writer");
    assert_eq!(info.holders.len(), 2);
    for reader in &info.holders {
        assert_eq!(reader.role, HolderRole::Reader);
        assert_lease_left(reader.ttl, LEASE);
    }
    assert!(info.writer_waiting.is_some());

    r1.release().await.unwrap();
    r2.release().await.unwrap();
}

#[tokio::test]
async fn a_crashed_holder_shows_the_lock_delay_left() {
    let client = client().await;
    let name = unique("inspect-delay");
    let delay = Duration::from_secs(30);
    std::mem::forget(client.acquire(&name).lease(Duration::from_millis(200)).lock_delay(delay).await.unwrap());

    let holding = inspect_one(&client, &name).await;
    assert!(holding.held && holding.holders.len() == 1, "{holding:?}");
    assert!(holding.ttl.is_some_and(|t| t <= Duration::from_millis(200)), "the lease left, not the delay: {holding:?}");

    tokio::time::sleep(Duration::from_millis(300)).await;
    let info = inspect_one(&client, &name).await;

    assert_eq!(info.kind, LockKind::Plain);
    assert!(!info.held && info.holders.is_empty(), "the lease is over: {info:?}");
    let left = info.delay.expect("the delay left");
    assert!(left > Duration::from_secs(20) && left <= delay, "{left:?}");
    assert!(exists(&mut raw().await, &lock_key(&name)).await, "the lock key itself keeps the delay");
}
