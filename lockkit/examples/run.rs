//! Work under a lock with `LockClient::with_lock` and `LockGuard::run`.
//!
//! 1. `with_lock` runs a fenced write and releases the lock when it is done: the next holder gets
//!    the lock at once.
//! 2. Work that outlives its lease (here a fixed 300 ms lease, so that nothing renews it) is
//!    stopped: `run` returns the loss, and the work writes no more. A write it sent just before
//!    the loss could still land; its fence is what lets the store refuse it once a newer holder
//!    has claimed the record, shown last.
//!
//! Run: `cargo run -p lockkit --example run` (uses `REDIS_URL`, default
//! `redis://127.0.0.1:6390`, for the lock and the store).

#[allow(dead_code)] // each example uses part of the store
#[path = "support/fenced_store.rs"]
mod fenced_store;

use std::{
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use fenced_store::FencedStore;
use lockkit::LockClient;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into());
    let client = LockClient::connect(&url).await?;
    let name = format!("examples:run:{:08x}", rand::random::<u32>());
    let mut store = FencedStore::open(&url, format!("{name}:record")).await?;

    println!("== 1. with_lock: the work gets the fence, the lock is released when it ends");
    let written = client
        .with_lock(&name, Duration::from_secs(2), |fence| {
            let store = &mut store;
            async move {
                let claimed = store.claim(fence).await?;
                let written = store.write(fence, "report v1").await?;
                Ok::<_, redis::RedisError>((fence, claimed && written))
            }
        })
        .await?;
    let (fence, accepted) = written?;
    println!("  wrote under fence {fence}: accepted {accepted}");
    let next = client.try_lock(&name).await?.expect("released by with_lock");
    println!("  the next holder got it at once, with fence {}", next.fence());
    next.release().await?;

    println!("== 2. run: work that outlives its lease is stopped");
    let guard = client.acquire(&name).lease(Duration::from_millis(300)).await?;
    let fence = guard.fence();
    let chunks = AtomicU32::new(0);
    let outcome = guard
        .run(async {
            let mut store = FencedStore::open(&url, format!("{name}:record")).await?;
            store.claim(fence).await?;
            loop {
                let chunk = chunks.fetch_add(1, Ordering::SeqCst);
                store.write(fence, &format!("chunk {chunk}")).await?;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            #[allow(unreachable_code)]
            Ok::<(), redis::RedisError>(())
        })
        .await;
    match outcome {
        Err(e) if e.is_lost() => {
            println!("  stopped after {} chunks: {e} (cause {:?})", chunks.load(Ordering::SeqCst), e.lease_loss())
        }
        other => panic!("the work never ends by itself: {other:?}"),
    }
    let stopped_at = chunks.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("  200 ms later, still {} chunks: the work was dropped", chunks.load(Ordering::SeqCst));
    assert_eq!(chunks.load(Ordering::SeqCst), stopped_at);

    println!("== a write sent under the lost lease, landing late, is refused once a newer holder claimed");
    let newer = client.lock(&name, Duration::from_secs(2)).await?;
    store.claim(newer.fence()).await?;
    let late = store.write(fence, "a late chunk").await?;
    println!("  fence {fence} after fence {} claimed: accepted {late}", newer.fence());
    assert!(!late);
    newer.release().await?;
    // The record and the name are not used again: drop the record, then the name's fence counter.
    store.remove().await?;
    client.retire_fence(&name).await?;
    Ok(())
}
