//! The fair lock: FIFO under contention, past a waiter killed in the queue; no barging by the
//! releaser; a waiter that gives up leaves; no key left behind.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use lockkit::LockClient;

use super::leftover_keys;
use crate::support::{Proxy, client, eventually, raw, unique};

const QUEUE_TIMEOUT: Duration = Duration::from_secs(3);

async fn queued(name: &str) -> u64 {
    redis::cmd("ZCARD").arg(format!("{{lockkit:{name}}}:queue")).query_async(&mut raw().await).await.unwrap()
}

async fn until_queued(name: &str, n: u64) {
    let name = name.to_owned();
    assert!(
        eventually(Duration::from_secs(10), || {
            let name = name.clone();
            async move { queued(&name).await == n }
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_get_the_lock_in_arrival_order_past_a_killed_one() {
    let name = unique("fair");
    let holder = client().await.fair(&name).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let proxy = Proxy::start().await;
    let mut tasks = Vec::new();
    for i in 0..7u64 {
        if i == 2 {
            // This waiter's process freezes in the queue and is then killed: neither its attempts
            // nor its leaving reach Redis again. The server drops it at its deadline.
            let frozen = LockClient::connect(&proxy.url()).await.unwrap();
            let waiter = {
                let name = name.clone();
                tokio::spawn(async move {
                    frozen.fair(&name).queue_timeout(QUEUE_TIMEOUT).wait(Duration::from_secs(60)).await
                })
            };
            until_queued(&name, i + 1).await;
            proxy.stall();
            waiter.abort();
            continue;
        }
        let (client, task_name, order) = (client().await, name.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let name = task_name;
            let guard = client.fair(&name).queue_timeout(QUEUE_TIMEOUT).wait(Duration::from_secs(60)).await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(guard.release().await.unwrap());
        }));
        until_queued(&name, i + 1).await;
    }

    assert!(holder.release().await.unwrap());
    for task in tasks {
        task.await.unwrap();
    }

    assert_eq!(*order.lock().unwrap(), vec![0, 1, 3, 4, 5, 6], "first come, first served");
    assert!(leftover_keys(&mut raw().await, &name).await.is_empty(), "no key left behind");
}

#[tokio::test]
async fn the_releaser_cannot_barge_past_a_waiter() {
    let (a, b) = (client().await, client().await);
    let name = unique("fair-barge");
    let first = a.fair(&name).await.unwrap();
    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move {
            let guard = b.fair(&name).wait(Duration::from_secs(10)).await.unwrap();
            let fence = guard.fence();
            guard.release().await.unwrap();
            fence
        })
    };
    until_queued(&name, 1).await;

    assert!(first.release().await.unwrap());
    let again = a.fair(&name).wait(Duration::from_secs(10)).await.unwrap();
    let waited = waiter.await.unwrap();

    assert!(waited < again.fence(), "the waiter got it before the releaser came back");
    again.release().await.unwrap();
}

/// A waiter that is queued (fair) or waiting (plain) behind a frozen connection, so it cannot
/// take the lock itself, while the lock is free: whether a newcomer gets in is then decided by
/// the lock's own rule alone. Returns whether the newcomer got in.
async fn newcomer_gets_in_past_a_frozen_waiter(fair: bool) -> bool {
    let name = unique("fair-newcomer");
    let (holder, newcomer) = (client().await, client().await);
    let proxy = Proxy::start().await;
    let frozen = LockClient::connect(&proxy.url()).await.unwrap();
    let held = if fair { holder.fair(&name).await } else { holder.acquire(&name).await }.unwrap();
    let waiter = {
        let name = name.clone();
        tokio::spawn(async move {
            let wait = Duration::from_secs(30);
            if fair { frozen.fair(&name).wait(wait).await } else { frozen.acquire(&name).wait(wait).await }
        })
    };
    if fair {
        until_queued(&name, 1).await;
    } else {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.stall();
    held.release().await.unwrap();

    let got_in = if fair { newcomer.fair(&name).await } else { newcomer.acquire(&name).await };
    waiter.abort();
    match got_in {
        Ok(guard) => {
            guard.release().await.unwrap();
            true
        }
        Err(e) if e.is_timeout() => false,
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn a_newcomer_cannot_barge_past_a_queued_waiter() {
    assert!(!newcomer_gets_in_past_a_frozen_waiter(true).await);
}

/// Control: the plain lock lets the newcomer barge past the waiter, so the check above would
/// catch barging.
#[tokio::test]
async fn control_the_plain_lock_lets_a_newcomer_barge() {
    assert!(newcomer_gets_in_past_a_frozen_waiter(false).await);
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_queue() {
    let (a, b) = (client().await, client().await);
    let name = unique("fair-timeout");
    let holder = a.fair(&name).await.unwrap();

    assert!(b.fair(&name).wait(Duration::from_millis(200)).await.unwrap_err().is_timeout());
    assert!(b.fair(&name).await.unwrap_err().is_timeout(), "try once: not the head");
    until_queued(&name, 0).await;

    holder.release().await.unwrap();
    assert!(leftover_keys(&mut raw().await, &name).await.is_empty());
}
