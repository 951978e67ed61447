//! Fencing tokens: strictly increasing per lock, and re-seedable after Redis lost its data.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use lockkit::{Fence, LockClient};

use crate::support::{client, redis_url, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fences_strictly_increase_over_1000_acquisitions_by_8_tasks() {
    let client = client().await;
    let name = Arc::new(unique("fences"));
    // Appended while holding the lock, so the order is the order of grants.
    let granted = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (client, name, granted) = (client.clone(), name.clone(), granted.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..125 {
                let guard = client.lock(&name, Duration::from_secs(60)).await.unwrap();
                granted.lock().unwrap().push(guard.fence());
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }

    let granted = granted.lock().unwrap();
    assert_eq!(granted.len(), 1000);
    // Strictly increasing, not gapless: on one Redis a refused first attempt spends a fence (its
    // `INCR` is in the same pipeline as its `SET NX`), as a refused PostgreSQL lease does.
    assert!(granted.windows(2).all(|w| w[0] < w[1]), "strictly increasing in grant order");
}

/// Redis loses everything (here `FLUSHDB` on a database no other test uses); the fence counter
/// restarts at 1, which a store would refuse, until the service re-seeds it from the store.
#[tokio::test]
async fn ensure_fence_at_least_reseeds_the_counter_after_data_loss() {
    let url = format!("{}/15", redis_url().trim_end_matches('/'));
    let client = LockClient::connect(&url).await.unwrap();
    let name = unique("reseed");
    let mut highest_accepted_by_store = Fence::new(0);
    for _ in 0..5 {
        let guard = client.try_lock(&name).await.unwrap().unwrap();
        highest_accepted_by_store = guard.fence();
        guard.release().await.unwrap();
    }
    let mut conn = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("FLUSHDB").query_async(&mut conn).await.unwrap();

    let after_loss = client.try_lock(&name).await.unwrap().unwrap();
    assert!(after_loss.fence() <= highest_accepted_by_store, "the control: a stale-looking fence");
    after_loss.release().await.unwrap();

    let seeded = client.ensure_fence_at_least(&name, highest_accepted_by_store).await.unwrap();
    let lower = client.ensure_fence_at_least(&name, Fence::new(1)).await.unwrap();
    let next = client.try_lock(&name).await.unwrap().unwrap();

    assert_eq!(seeded, highest_accepted_by_store);
    assert_eq!(lower, highest_accepted_by_store, "an atomic max never lowers the counter");
    assert!(next.fence() > highest_accepted_by_store);
    next.release().await.unwrap();
}

#[tokio::test]
async fn ensure_fence_at_least_is_exact_beyond_double_precision() {
    let client = client().await;
    let name = unique("big-fence");
    let big = Fence::new((1 << 53) + 1);

    client.ensure_fence_at_least(&name, big).await.unwrap();
    let guard = client.try_lock(&name).await.unwrap().unwrap();

    assert_eq!(guard.fence().get(), (1 << 53) + 2);
    guard.release().await.unwrap();
}
