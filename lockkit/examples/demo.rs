//! A tour of lockkit against a real Redis (`make demo` starts one):
//! several tasks contending for a few locks, fences increasing, the watchdog renewing a short
//! lease, and the loss signal when the lock is taken away from outside.
//!
//! Run: `cargo run -p lockkit --example demo` (uses `REDIS_URL`, default `redis://127.0.0.1:6390`).

use std::time::{Duration, Instant};

use lockkit::LockClient;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into());
    let client = LockClient::builder(&url).default_lease(Duration::from_secs(1)).connect().await?;
    let run = format!("demo:{:06x}", rand::random::<u32>() & 0xff_ffff);
    let started = Instant::now();

    println!("== 6 workers contend for 2 locks; every grant carries a larger fence");
    let mut workers = Vec::new();
    for worker in 0..6 {
        let client = client.clone();
        let name = format!("{run}:shard-{}", worker % 2);
        workers.push(tokio::spawn(async move {
            for _ in 0..2 {
                let guard = client.lock(&name, Duration::from_secs(10)).await?;
                println!(
                    "  {:>5} ms  worker {worker} holds {name} with fence {} (waited {} ms, {} attempts)",
                    started.elapsed().as_millis(),
                    guard.fence(),
                    guard.waited().as_millis(),
                    guard.attempts()
                );
                tokio::time::sleep(Duration::from_millis(40)).await;
                guard.release().await?;
            }
            Ok::<_, lockkit::Error>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }

    println!("== the watchdog keeps a 1 s lease alive for 2.5 s");
    let name = format!("{run}:long-job");
    let guard = client.try_lock(&name).await?.expect("nobody else uses this lock");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let info = &client.inspect(&name).await?[0];
    println!("  held: {}, lease left: {:?}, lost: {}", info.held, info.ttl, guard.is_lost());
    println!("  released, still ours: {}", guard.release().await?);

    println!("== an operator deletes the key; the holder is told before its deadline");
    let name = format!("{run}:fragile");
    let guard = client.try_lock(&name).await?.expect("nobody else uses this lock");
    let mut conn = redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?;
    let deleted_at = Instant::now();
    let _: () = redis::cmd("DEL").arg(format!("{{lockkit:{name}}}")).query_async(&mut conn).await?;
    let cause = guard.lost().await;
    println!(
        "  lost after {} ms: {cause:?}; writes fenced with {} must now be refused",
        deleted_at.elapsed().as_millis(),
        guard.fence()
    );
    println!("  released, still ours: {}", guard.release().await?);
    Ok(())
}
