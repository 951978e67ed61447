//! `rslock-bench`: the `lockctl bench` contract, run against the crates.io `rslock` crate.
//!
//! C tokio tasks loop for D ms; task i uses lock `i % K`; each acquire+release pair is timed.
//! Prints one JSON line: concurrency, locks, pairs, pairs_per_sec, p50_us, p99_us, overlaps.
//!
//! Acquiring: `LockManager::lock` is retried until it succeeds, as `LockManager::acquire` does
//! (`lock` itself makes `retry_count` attempts with a random 0..retry_delay ms pause between them).
//! Releasing: `LockManager::unlock`.
//!
//! `--redis-url` takes one URL or several (comma-separated or repeated): several independent
//! masters make rslock run Redlock over them (`LockManager::new(urls)`, quorum n/2+1).

use std::{
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use clap::Parser;
use rslock::{LockError, LockManager};
use serde_json::json;

/// Lock TTL, as in `lockctl bench`.
const TTL: Duration = Duration::from_secs(5);
/// A task still not holding its lock this long after the run's end gives up (keeps runs bounded).
const GIVE_UP_AFTER_END: Duration = Duration::from_secs(10);

#[derive(Parser, Debug)]
#[command(about = "Benchmark rslock acquire+release pairs (lockctl bench contract)")]
struct Args {
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    #[arg(long, default_value_t = 5000)]
    duration_ms: u64,
    /// Distinct locks; defaults to the concurrency (uncontended).
    #[arg(long)]
    locks: Option<usize>,
    /// One Redis, or several independent masters for Redlock (comma-separated or repeated).
    #[arg(long, default_value = "redis://127.0.0.1:6390", value_delimiter = ',')]
    redis_url: Vec<String>,
    /// rslock's retry_delay: pause between attempts is uniform in [0, this) ms (library default 200).
    #[arg(long, default_value_t = 10)]
    retry_delay_ms: u64,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("rslock-bench: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<serde_json::Value, String> {
    let concurrency = args.concurrency.max(1);
    let locks = args.locks.unwrap_or(concurrency).max(1);
    let duration = Duration::from_millis(args.duration_ms);

    let urls: Vec<&str> = args.redis_url.iter().map(|u| u.trim()).filter(|u| !u.is_empty()).collect();
    if urls.is_empty() {
        return Err("--redis-url: no URL given".into());
    }
    let mut manager = LockManager::new(urls.clone());
    // Keep the library's default attempt count (3) per `lock` call; only the pause is shortened.
    manager.set_retry(3, Duration::from_millis(args.retry_delay_ms.max(1)));

    // Connect once before the clock starts, so connection set-up is not timed as a pair.
    let warm = manager
        .lock("peerbench:rslock:warmup", Duration::from_secs(1))
        .await
        .map_err(|e| format!("cannot lock on {} server(s) ({}): {e}", urls.len(), urls.join(",")))?;
    manager.unlock(&warm).await;

    let run_id = run_id();
    // Holders per lock: > 0 on acquire means two tasks hold the same lock at once.
    let holders: Arc<Vec<AtomicUsize>> = Arc::new((0..locks).map(|_| AtomicUsize::new(0)).collect());
    let overlaps = Arc::new(AtomicU64::new(0));
    let contended = locks < concurrency;

    let started = Instant::now();
    let stop = started + duration;
    let mut tasks = Vec::with_capacity(concurrency);
    for task in 0..concurrency {
        let manager = manager.clone();
        let index = task % locks;
        let name = format!("peerbench:rslock:{run_id}:{index}");
        let holders = Arc::clone(&holders);
        let overlaps = Arc::clone(&overlaps);
        tasks.push(tokio::spawn(async move {
            let mut latencies_us = Vec::new();
            while Instant::now() < stop {
                let t0 = Instant::now();
                let lock = loop {
                    match manager.lock(name.as_str(), TTL).await {
                        Ok(lock) => break lock,
                        Err(LockError::Unavailable) | Err(LockError::TtlExceeded) => {
                            if Instant::now() > stop + GIVE_UP_AFTER_END {
                                return Err(format!("{name}: not acquired {GIVE_UP_AFTER_END:?} after the run's end"));
                            }
                        }
                        Err(e) => return Err(format!("{name}: {e}")),
                    }
                };
                if holders[index].fetch_add(1, Ordering::SeqCst) > 0 {
                    overlaps.fetch_add(1, Ordering::Relaxed);
                }
                if contended {
                    // Let other tasks run while this one holds the lock, so a double grant can show.
                    tokio::task::yield_now().await;
                }
                // Leave before releasing: once the key is gone another task may rightly take it.
                holders[index].fetch_sub(1, Ordering::SeqCst);
                manager.unlock(&lock).await;
                latencies_us.push(t0.elapsed().as_micros() as u64);
            }
            Ok(latencies_us)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.map_err(|e| format!("bench task panicked: {e}"))??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_unstable();
    let percentile =
        |p: f64| all.get(((all.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0);
    Ok(json!({
        "concurrency": concurrency,
        "locks": locks,
        "pairs": all.len(),
        "pairs_per_sec": (all.len() as f64 / elapsed).round(),
        "p50_us": percentile(0.50),
        "p99_us": percentile(0.99),
        "overlaps": overlaps.load(Ordering::Relaxed),
    }))
}

fn run_id() -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("{:08x}", (nanos as u32) ^ std::process::id())
}
