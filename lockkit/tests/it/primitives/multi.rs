//! The multi-lock: overlapping sets from many tasks never deadlock and never overlap; a partial
//! acquisition is undone.

use std::{sync::Arc, time::Duration};

use super::Occupancy;
use crate::support::{client, unique};

const NAMES: usize = 5;
const TASKS: usize = 12;
const ROUNDS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_sets_from_many_tasks_neither_deadlock_nor_overlap() {
    let client = client().await;
    let names: Arc<Vec<String>> = Arc::new((0..NAMES).map(|_| unique("multi")).collect());
    let rooms: Arc<Vec<Occupancy>> = Arc::new((0..NAMES).map(|_| Occupancy::default()).collect());
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (client, names, rooms) = (client.clone(), names.clone(), rooms.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                // Three names, in an order that differs between tasks (reversed for odd tasks).
                let mut picked: Vec<usize> = (0..3).map(|i| (task + round + i * 2) % NAMES).collect();
                if task % 2 == 1 {
                    picked.reverse();
                }
                let set: Vec<&str> = picked.iter().map(|&i| names[i].as_str()).collect();
                let held = client.multi(&set).wait(Duration::from_secs(60)).await.unwrap();
                assert_eq!(held.fences().len(), 3, "one fence per lock");
                picked.iter().for_each(|&i| rooms[i].enter());
                tokio::time::sleep(Duration::from_millis(2)).await;
                picked.iter().for_each(|&i| rooms[i].leave());
                assert!(held.release().await.unwrap());
            }
        }));
    }
    // A deadlock would hang here; the 60 s waits would then fail the tasks.
    for task in tasks {
        task.await.unwrap();
    }
    for room in rooms.iter() {
        assert_eq!(room.most(), 1, "a lock was held by two multi-locks at once");
    }
}

#[tokio::test]
async fn a_partial_acquisition_is_undone() {
    let (holder, multi) = (client().await, client().await);
    let (free, taken) = (unique("multi-free"), unique("multi-taken"));
    // Sorted, "free" comes first: it is taken, then "taken" fails.
    let (free, taken) = if free < taken { (free, taken) } else { (format!("{taken}-a"), format!("{taken}-b")) };
    let blocker = holder.try_lock(&taken).await.unwrap().unwrap();

    let err = multi.multi(&[&taken, &free]).wait(Duration::from_millis(200)).await.unwrap_err();

    assert!(err.is_timeout());
    let after = holder.try_lock(&free).await.unwrap().expect("the partial grant was undone");
    after.release().await.unwrap();
    blocker.release().await.unwrap();
}

/// Control: taking the same two locks one by one in the caller's order, two tasks that grab them
/// in opposite orders wait for each other until both time out: the deadlock that the canonical
/// order prevents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_opposite_orders_without_the_multi_lock_deadlock() {
    let client = client().await;
    let (a, b) = (unique("multi-control"), unique("multi-control"));
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let grab = |first: String, second: String| {
        let (client, barrier) = (client.clone(), barrier.clone());
        tokio::spawn(async move {
            let one = client.try_lock(&first).await.unwrap().unwrap();
            barrier.wait().await;
            let two = client.lock(&second, Duration::from_millis(500)).await;
            let deadlocked = two.as_ref().is_err_and(lockkit::Error::is_timeout);
            barrier.wait().await;
            drop((one, two));
            deadlocked
        })
    };
    let (x, y) = (grab(a.clone(), b.clone()), grab(b, a));
    assert!(x.await.unwrap() && y.await.unwrap(), "each held one lock and waited for the other");
}
