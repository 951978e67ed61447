//! `lockctl`: lockkit for operators and benchmarks. Every command prints JSON lines on stdout.
//!
//! ```text
//! lockctl --url URL acquire NAME [--ttl-ms N] [--wait-ms W] [--hold-ms H]
//! lockctl inspect PATTERN
//! lockctl fence NAME --at-least N
//! lockctl bench [--concurrency C] [--duration-ms D] [--locks K]
//! ```
//!
//! The URL picks the backend: `redis://` (one Redis), `redis+cluster://h:p,h:p` (a cluster's seed
//! nodes) or `redlock://h:p,h:p,...` (independent masters). `--redis-url` (env `REDIS_URL`) is the
//! older spelling of `--url` (env `LOCKKIT_URL`), which wins when both are given.

use std::{
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use clap::{Parser, Subcommand};
use lockkit::{Fence, LockClient};
use serde_json::json;

/// Exit code when the lock could not be acquired within the wait, or (Redlock) too few nodes
/// answered to decide.
const NOT_ACQUIRED: u8 = 3;

#[derive(Parser)]
#[command(version, about = "Inspect, hold and benchmark lockkit locks on Redis, Redis Cluster or Redlock")]
struct Cli {
    /// Lock URL: `redis://[user:password@]host:port[/db]`, `redis+cluster://host:port,...` or
    /// `redlock://[user:password@]host:port,...`.
    #[arg(long, env = "LOCKKIT_URL", hide_env_values = true)]
    url: Option<String>,
    /// One Redis (`redis://[user:password@]host:port[/db]`); used when no `--url` is given.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6390", hide_env_values = true)]
    redis_url: String,
    /// Key prefix of the locks.
    #[arg(long, default_value = "lockkit")]
    prefix: String,
    /// Multiplexed connections to spread operations over.
    #[arg(long, default_value_t = 2)]
    connections: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Acquire a lock, hold it (the watchdog renews it unless --ttl-ms is given), release it.
    Acquire {
        name: String,
        /// Fixed lease in ms (no watchdog). Default: 30 s renewed by the watchdog.
        #[arg(long)]
        ttl_ms: Option<u64>,
        /// How long to wait for a held lock.
        #[arg(long, default_value_t = 0)]
        wait_ms: u64,
        /// How long to hold the lock once acquired.
        #[arg(long, default_value_t = 0)]
        hold_ms: u64,
    },
    /// Show locks matching a glob pattern: held, TTL, fence.
    Inspect { pattern: String },
    /// Raise a lock's fence counter to at least N (after Redis lost its data).
    Fence {
        name: String,
        #[arg(long)]
        at_least: u64,
    },
    /// Measure acquire+release pairs per second. With --locks >= --concurrency every task has its
    /// own lock (uncontended); with --locks 1 all tasks hand one lock over to each other.
    Bench {
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        #[arg(long, default_value_t = 5000)]
        duration_ms: u64,
        /// Distinct locks; defaults to the concurrency (uncontended).
        #[arg(long)]
        locks: Option<usize>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("LOCKCTL_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            println!("{}", json!({"event": "error", "error": e.to_string(), "retryable": e.is_retryable()}));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> lockkit::Result<ExitCode> {
    let url = cli.url.as_deref().unwrap_or(&cli.redis_url);
    let client = match LockClient::builder(url).prefix(&cli.prefix).connections(cli.connections).connect().await {
        Ok(client) => client,
        Err(e) if e.is_no_quorum() && matches!(cli.command, Command::Acquire { .. }) => {
            return Ok(no_quorum(&cli.command, &e));
        }
        Err(e) => return Err(e),
    };
    match cli.command {
        Command::Acquire { name, ttl_ms, wait_ms, hold_ms } => acquire(&client, &name, ttl_ms, wait_ms, hold_ms).await,
        Command::Inspect { pattern } => {
            for lock in client.inspect(&pattern).await? {
                let ttl_ms = lock.ttl.map(|t| t.as_millis() as u64);
                let fence = lock.fence.map(Fence::get);
                println!("{}", json!({"name": lock.name, "held": lock.held, "ttl_ms": ttl_ms, "fence": fence}));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Fence { name, at_least } => {
            let fence = client.ensure_fence_at_least(&name, Fence::new(at_least)).await?;
            println!("{}", json!({"name": name, "fence": fence.get()}));
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench { concurrency, duration_ms, locks } => {
            let report = bench(&client, concurrency.max(1), Duration::from_millis(duration_ms), locks).await?;
            println!("{report}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn acquire(
    client: &LockClient,
    name: &str,
    ttl_ms: Option<u64>,
    wait_ms: u64,
    hold_ms: u64,
) -> lockkit::Result<ExitCode> {
    let mut request = client.acquire(name).wait(Duration::from_millis(wait_ms));
    if let Some(ttl) = ttl_ms {
        request = request.lease(Duration::from_millis(ttl));
    }
    let guard = match request.await {
        Ok(guard) => guard,
        Err(e) if e.is_timeout() => {
            println!("{}", json!({"event": "not_acquired", "name": name, "reason": "held", "waited_ms": wait_ms}));
            return Ok(ExitCode::from(NOT_ACQUIRED));
        }
        Err(e) if e.is_no_quorum() => {
            println!(
                "{}",
                json!({"event": "not_acquired", "name": name, "reason": "no_quorum", "error": e.to_string()})
            );
            return Ok(ExitCode::from(NOT_ACQUIRED));
        }
        Err(e) => return Err(e),
    };
    println!(
        "{}",
        json!({"event": "acquired", "name": name, "fence": guard.fence().get(), "waited_ms": guard.waited().as_millis() as u64})
    );
    tokio::select! {
        cause = guard.lost() => println!("{}", json!({"event": "lost", "name": name, "cause": format!("{cause:?}")})),
        () = tokio::time::sleep(Duration::from_millis(hold_ms)) => {}
    }
    let held = guard.release().await?;
    println!("{}", json!({"event": "released", "name": name, "held": held}));
    Ok(ExitCode::SUCCESS)
}

/// An acquire that could not start because too few Redlock nodes answered.
fn no_quorum(command: &Command, e: &lockkit::Error) -> ExitCode {
    let Command::Acquire { name, .. } = command else { unreachable!("only acquire maps no quorum to exit 3") };
    println!("{}", json!({"event": "not_acquired", "name": name, "reason": "no_quorum", "error": e.to_string()}));
    ExitCode::from(NOT_ACQUIRED)
}

/// Runs `concurrency` tasks for `duration`, each looping acquire+release, and reports pairs/s
/// with latency percentiles of the pairs.
async fn bench(
    client: &LockClient,
    concurrency: usize,
    duration: Duration,
    locks: Option<usize>,
) -> lockkit::Result<serde_json::Value> {
    let locks = locks.unwrap_or(concurrency).max(1);
    let run_id = format!("{:08x}", rand_suffix());
    let started = Instant::now();
    let stop = started + duration;
    let mut tasks = Vec::with_capacity(concurrency);
    for task in 0..concurrency {
        let client = client.clone();
        let name = Arc::new(format!("bench:{run_id}:{}", task % locks));
        tasks.push(tokio::spawn(async move {
            let mut latencies_us = Vec::new();
            while Instant::now() < stop {
                let t0 = Instant::now();
                let guard = client.lock(&name, Duration::from_secs(5)).await?;
                guard.release().await?;
                latencies_us.push(t0.elapsed().as_micros() as u64);
            }
            Ok::<_, lockkit::Error>(latencies_us)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("bench task panicked")?);
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_unstable();
    let percentile = |p: f64| all.get(((all.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0);
    Ok(json!({
        "concurrency": concurrency,
        "locks": locks,
        "pairs": all.len(),
        "pairs_per_sec": (all.len() as f64 / elapsed).round(),
        "p50_us": percentile(0.50),
        "p99_us": percentile(0.99),
    }))
}

fn rand_suffix() -> u32 {
    std::process::id()
        ^ Instant::now().elapsed().subsec_nanos()
        ^ (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos())
}
