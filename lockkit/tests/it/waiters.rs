//! A line of waiters behind a held lock, for the backends whose release wakes one waiter of the
//! process (ZooKeeper, etcd and PostgreSQL).

use std::time::Duration;

use lockkit::LockClient;

use crate::support::unique;

/// Queues `waiters` acquires of one lock on `waiting` (one client, so one process's wake-ups)
/// behind a lock `holding` holds, then releases it: each waiter takes the lock in turn, releases
/// it at once, and reports its attempts. A waiter woken only when its own predecessor leaves
/// makes the same few attempts wherever it stands in the line; one woken by every release of the
/// lock makes one more per waiter served before it.
pub(crate) async fn attempts_in_a_line_of_waiters(
    holding: &LockClient,
    waiting: &LockClient,
    waiters: usize,
) -> Vec<u32> {
    let name = unique("line");
    let held = holding.try_lock(&name).await.unwrap().expect("free");
    let mut line = Vec::new();
    for _ in 0..waiters {
        let (waiting, name) = (waiting.clone(), name.clone());
        line.push(tokio::spawn(async move {
            let guard = waiting.lock(&name, Duration::from_secs(30)).await.expect("served in turn");
            let attempts = guard.attempts();
            guard.release().await.unwrap();
            attempts
        }));
        // In the line before the next one comes (were it not, the counts would be the same).
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    held.release().await.unwrap();
    let mut attempts = Vec::new();
    for waiter in line {
        attempts.push(waiter.await.unwrap());
    }
    attempts
}
