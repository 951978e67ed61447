//! A fenced update: the lock alone cannot stop a holder that pauses past its lease, the store's
//! fence check does.
//!
//! Holder A takes the lock with a short lease and claims the record with its fence, then pauses
//! (a GC pause, swap, `SIGSTOP`) past its lease. Holder B takes the lock, with a larger fence,
//! claims the record and writes. A wakes up and writes: the store refuses the older fence, and
//! B's value stands. The store is a Redis hash changed only by fence-checking scripts
//! (`support/fenced_store.rs`).
//!
//! Run: `cargo run -p lockkit --example fenced_update` (uses `REDIS_URL`, default
//! `redis://127.0.0.1:6390`, for the lock and the store).

#[allow(dead_code)] // each example uses part of the store
#[path = "support/fenced_store.rs"]
mod fenced_store;

use std::time::Duration;

use fenced_store::FencedStore;
use lockkit::LockClient;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into());
    let client = LockClient::connect(&url).await?;
    let name = format!("examples:fenced-update:{:08x}", rand::random::<u32>());
    let mut store = FencedStore::open(&url, format!("{name}:record")).await?;

    // A: a fixed lease of 500 ms (no watchdog), so that a pause outlives it.
    let a = client.acquire(&name).lease(Duration::from_millis(500)).await?;
    println!("A holds the lock with fence {}; claims the record: {}", a.fence(), store.claim(a.fence()).await?);

    println!("A pauses for 800 ms, past its lease");
    tokio::time::sleep(Duration::from_millis(800)).await;

    let b = client.lock(&name, Duration::from_secs(5)).await?;
    println!("B holds the lock with fence {}; claims the record: {}", b.fence(), store.claim(b.fence()).await?);
    println!("B writes under fence {}: accepted {}", b.fence(), store.write(b.fence(), "written by B").await?);

    // A resumes where it stopped, unaware: its write carries its old fence.
    let accepted = store.write(a.fence(), "written by A, late").await?;
    println!("A writes late under fence {}: accepted {accepted}", a.fence());
    println!("A could tell, had it looked: lost = {}", a.is_lost());
    assert!(!accepted, "the store must refuse the older fence");

    let value = store.value().await?;
    println!("the record holds {value:?}");
    assert_eq!(value.as_deref(), Some("written by B"));

    println!("released: A still held it = {}, B still held it = {}", a.release().await?, b.release().await?);
    // The record and the name are not used again: drop the record, then the name's fence counter.
    store.remove().await?;
    client.retire_fence(&name).await?;
    Ok(())
}
