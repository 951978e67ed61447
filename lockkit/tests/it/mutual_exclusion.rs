//! Mutual exclusion under contention, checked by a read-sleep-write that detects overlaps.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::Duration,
};

use crate::support::{client, unique};

const TASKS: usize = 64;
const LOCKS: usize = 3;
const ROUNDS: usize = 4;

/// A counter updated by read, pause, write: correct only if no two updates overlap.
#[derive(Default)]
struct Protected {
    value: AtomicU64,
    inside: AtomicU32,
    overlaps: AtomicU32,
}

impl Protected {
    async fn read_sleep_write(&self) {
        if self.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let read = self.value.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.value.store(read + 1, Ordering::SeqCst);
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn run(locked: bool) -> Vec<Arc<Protected>> {
    let client = client().await;
    let names: Vec<String> = (0..LOCKS).map(|_| unique("mutex")).collect();
    let counters: Vec<Arc<Protected>> = (0..LOCKS).map(|_| Arc::default()).collect();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (client, name, counter) = (client.clone(), names[task % LOCKS].clone(), counters[task % LOCKS].clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                if locked {
                    let guard = client.lock(&name, Duration::from_secs(60)).await.unwrap();
                    counter.read_sleep_write().await;
                    assert!(guard.release().await.unwrap(), "lease must not end while held");
                } else {
                    counter.read_sleep_write().await;
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    counters
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_over_three_locks_never_overlap() {
    let counters = run(true).await;

    for (lock, counter) in counters.iter().enumerate() {
        let tasks_on_lock = (0..TASKS).filter(|task| task % LOCKS == lock).count();
        assert_eq!(counter.overlaps.load(Ordering::SeqCst), 0);
        assert_eq!(counter.value.load(Ordering::SeqCst), (tasks_on_lock * ROUNDS) as u64, "no lost update");
    }
    let total: u64 = counters.iter().map(|c| c.value.load(Ordering::SeqCst)).sum();
    assert_eq!(total, (TASKS * ROUNDS) as u64);
}

/// Control: the same workload without the lock overlaps and loses updates, so the check above
/// can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_without_the_lock_overlaps() {
    let counters = run(false).await;

    let overlaps: u32 = counters.iter().map(|c| c.overlaps.load(Ordering::SeqCst)).sum();
    let total: u64 = counters.iter().map(|c| c.value.load(Ordering::SeqCst)).sum();
    assert!(overlaps > 0);
    assert!(total < (TASKS * ROUNDS) as u64);
}
