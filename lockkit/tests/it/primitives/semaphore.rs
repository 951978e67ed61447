//! The semaphore: never more holders than permits, while clients are killed holding permits,
//! whose permits come back after their lease (server-timed); each permit its own fence.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use super::{Occupancy, leftover_keys};
use crate::support::{client, raw, unique};

const PERMITS: u32 = 3;
const TASKS: usize = 10;
const ROUNDS: usize = 4;

/// Tasks take a permit, work, and release; every third round of every third task "is killed"
/// holding its permit (a fixed lease, never released). Returns the occupancy and the fences.
async fn run(permits: Option<u32>) -> (Arc<Occupancy>, Vec<u64>) {
    let name = unique("semaphore");
    let room = Arc::new(Occupancy::default());
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (name, room) = (name.clone(), room.clone());
        tasks.push(tokio::spawn(async move {
            let client = client().await;
            let mut fences = Vec::new();
            for round in 0..ROUNDS {
                let killed = task % 3 == 0 && round == 1;
                let permit = match permits {
                    Some(permits) => {
                        let acquire = client.semaphore(&name, permits).wait(Duration::from_secs(60));
                        let acquire = if killed { acquire.lease(Duration::from_millis(300)) } else { acquire };
                        Some(acquire.await.unwrap())
                    }
                    None => None,
                };
                fences.extend(permit.as_ref().map(|p| p.fence().get()));
                room.enter();
                tokio::time::sleep(Duration::from_millis(5)).await;
                room.leave();
                match permit {
                    // Killed: the permit is never released; its holder does no more work.
                    Some(permit) if killed => std::mem::forget(permit),
                    Some(permit) => assert!(permit.release().await.unwrap()),
                    None => {}
                }
            }
            fences
        }));
    }
    let mut fences = Vec::new();
    for task in tasks {
        fences.extend(task.await.unwrap());
    }
    if permits.is_some() {
        // Only the killed permits may remain, and they expire by themselves.
        let gone = crate::support::eventually(Duration::from_secs(5), || {
            let name = name.clone();
            async move { leftover_keys(&mut raw().await, &name).await.is_empty() }
        });
        assert!(gone.await, "the killed permits expire, and the key with them");
    }
    (room, fences)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_are_never_exceeded_while_clients_are_killed() {
    let (room, fences) = run(Some(PERMITS)).await;

    assert!(room.most() <= PERMITS, "{} holders at once with {PERMITS} permits", room.most());
    assert!(room.most() >= 2, "permits were shared (the test exercises concurrency)");
    assert_eq!(fences.len(), TASKS * ROUNDS, "every task got every permit: killed permits came back");
    assert_eq!(fences.iter().collect::<BTreeSet<_>>().len(), fences.len(), "each permit has its own fence");
}

/// Control: the same workload without the semaphore has more holders at once than permits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_without_the_semaphore_the_count_is_exceeded() {
    let (room, _) = run(None).await;
    assert!(room.most() > PERMITS);
    assert_eq!(room.inside(), 0);
}

#[tokio::test]
async fn zero_permits_is_a_configuration_error() {
    let err = client().await.semaphore(&unique("semaphore-zero"), 0).await.unwrap_err();
    assert_eq!(err.kind(), lockkit::ErrorKind::Config);
}
