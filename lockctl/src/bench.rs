//! `lockctl bench`: acquire+release pairs per second with percentiles, on the plain or the fair
//! lock.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use lockkit::LockClient;
use serde_json::json;

/// One grant in a bench run: which lock, its fence, and when (µs since the start) it was granted
/// and released.
struct Grant {
    lock: usize,
    fence: u64,
    granted_us: u64,
    released_us: u64,
}

/// Runs `concurrency` tasks for `duration`, each looping acquire+release (of the plain or the
/// fair lock), and reports pairs/s with percentiles of the pairs, of the wait for the lock, and
/// of the hand-over: from one holder's release to the next grant of the same lock.
pub(crate) async fn bench(
    client: &LockClient,
    concurrency: usize,
    duration: Duration,
    locks: Option<usize>,
    fair: bool,
) -> lockkit::Result<serde_json::Value> {
    let locks = locks.unwrap_or(concurrency).max(1);
    let run_id = format!("{:08x}", rand_suffix());
    let started = Instant::now();
    let stop = started + duration;
    let mut tasks = Vec::with_capacity(concurrency);
    for task in 0..concurrency {
        let client = client.clone();
        let lock = task % locks;
        let name = Arc::new(format!("bench:{run_id}:{}:{lock}", if fair { "fair" } else { "plain" }));
        tasks.push(tokio::spawn(async move {
            let (mut pairs_us, mut waits_us, mut grants) = (Vec::new(), Vec::new(), Vec::new());
            let since = |t: Instant| t.duration_since(started).as_micros() as u64;
            while Instant::now() < stop {
                let t0 = Instant::now();
                let wait = Duration::from_secs(5);
                let guard = if fair { client.fair(&name).wait(wait).await? } else { client.lock(&name, wait).await? };
                let granted = Instant::now();
                let fence = guard.fence().get();
                guard.release().await?;
                let released = Instant::now();
                waits_us.push((granted - t0).as_micros() as u64);
                pairs_us.push((released - t0).as_micros() as u64);
                grants.push(Grant { lock, fence, granted_us: since(granted), released_us: since(released) });
            }
            Ok::<_, lockkit::Error>((pairs_us, waits_us, grants))
        }));
    }
    let (mut pairs, mut waits, mut grants) = (Vec::new(), Vec::new(), Vec::new());
    for task in tasks {
        let (p, w, g) = task.await.expect("bench task panicked")?;
        pairs.extend(p);
        waits.extend(w);
        grants.extend(g);
    }
    let elapsed = started.elapsed().as_secs_f64();
    // Consecutive grants of one lock: the release of one to the grant of the next. Every grant of
    // the run is here, so fence order is grant order; fences may skip values (a refused first
    // attempt spends one on Redis), so the next grant is the next in that order, not fence + 1.
    grants.sort_unstable_by_key(|g| (g.lock, g.fence));
    let mut handovers: Vec<u64> = grants
        .windows(2)
        .filter(|w| w[0].lock == w[1].lock)
        .map(|w| w[1].granted_us.saturating_sub(w[0].released_us))
        .collect();
    let percentile = |values: &mut Vec<u64>, p: f64| {
        values.sort_unstable();
        values.get(((values.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0)
    };
    Ok(json!({
        "lock": if fair { "fair" } else { "plain" },
        "concurrency": concurrency,
        "locks": locks,
        "pairs": pairs.len(),
        "pairs_per_sec": (pairs.len() as f64 / elapsed).round(),
        "p50_us": percentile(&mut pairs, 0.50),
        "p99_us": percentile(&mut pairs, 0.99),
        "wait_p50_us": percentile(&mut waits, 0.50),
        "wait_p99_us": percentile(&mut waits, 0.99),
        "wait_max_us": waits.iter().max().copied().unwrap_or(0),
        "handover_p50_us": percentile(&mut handovers, 0.50),
        "handover_p99_us": percentile(&mut handovers, 0.99),
    }))
}

fn rand_suffix() -> u32 {
    std::process::id()
        ^ Instant::now().elapsed().subsec_nanos()
        ^ (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos())
}
