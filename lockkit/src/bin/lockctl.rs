//! `lockctl`: lockkit for operators and benchmarks. Every command prints JSON lines on stdout.
//!
//! ```text
//! lockctl --url URL acquire NAME [--ttl-ms N [--fixed]] [--wait-ms W] [--hold-ms H]
//! lockctl inspect PATTERN   # per lock: name, held, ttl_ms, fence, kind, holders, queue, permits, delay_ms
//! lockctl fence NAME --at-least N
//! lockctl bench [--concurrency C] [--duration-ms D] [--locks K] [--fair]
//! ```
//!
//! The URL picks the backend: `redis://` (one Redis), `redis+cluster://h:p,h:p` (a cluster's seed
//! nodes), `redlock://h:p,h:p,...` (independent masters), `zk://h:p[,h:p]/chroot` (ZooKeeper),
//! `etcd://h:p[,h:p]` (etcd v3), `postgres://...` (a lease table) or `postgres+advisory://...`
//! (session advisory locks). `--redis-url` (env `REDIS_URL`) is the older spelling of `--url`
//! (env `LOCKKIT_URL`), which wins when both are given.
//!
//! `acquire` behaves the same on every URL: JSON events `acquired` (with its `fence`), `lost` if
//! the lease could not be renewed in time, then `released` (`held: false` after a loss); exit 3
//! when the lock was not acquired within `--wait-ms`. `--ttl-ms N` is the lease the watchdog
//! renews (on ZooKeeper: the session timeout asked for, which the server clamps to between 2 and 20
//! ticks; on etcd: rounded up to whole seconds on the server); with `--fixed` it is not renewed.

use std::{
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use clap::{Parser, Subcommand};
use lockkit::{Fence, LockClient, LockInfo};
use serde_json::json;

/// Exit code when the lock could not be acquired within the wait, or (Redlock) too few nodes
/// answered to decide.
const NOT_ACQUIRED: u8 = 3;

#[derive(Parser)]
#[command(
    version,
    about = "Inspect, hold and benchmark lockkit locks on Redis, Redis Cluster, Redlock, ZooKeeper, etcd or PostgreSQL"
)]
struct Cli {
    /// Lock URL: `redis://[user:password@]host:port[/db]`, `redis+cluster://host:port,...`,
    /// `redlock://[user:password@]host:port,...`, `zk://[user:password@]host:port[,...]/chroot`,
    /// `etcd://[user:password@]host:port[,...]`, `postgres://...` or `postgres+advisory://...`.
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
    /// Acquire a lock, hold it (the watchdog renews it unless --fixed is given), release it.
    Acquire {
        name: String,
        /// Lease in ms, renewed by the watchdog every third of it (ZooKeeper: the session
        /// timeout). Default: 30 s.
        #[arg(long)]
        ttl_ms: Option<u64>,
        /// Do not renew: the lease simply ends after --ttl-ms.
        #[arg(long, requires = "ttl_ms")]
        fixed: bool,
        /// How long to wait for a held lock.
        #[arg(long, default_value_t = 0)]
        wait_ms: u64,
        /// How long to hold the lock once acquired.
        #[arg(long, default_value_t = 0)]
        hold_ms: u64,
    },
    /// Show locks matching a glob pattern: held, TTL, fence, and per primitive its holders (with
    /// the time left to each), queue, permits and lock-delay.
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
        /// Also run the same load on the fair lock, right after the plain one, and print both
        /// (compare their wait and hand-over percentiles).
        #[arg(long)]
        fair: bool,
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

/// Whole milliseconds of a time left.
fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// One lock's JSON line: `name, held, ttl_ms, fence` as always, then `kind`, `holders` (`role`,
/// `id`: a short hash of the token, `ttl_ms`), `owner`, `permits_out` and `permits` (the limit),
/// `queue` (`id`, `deadline_ms`, head first), `writer_waiting_ms` and `delay_ms`.
fn inspect_line(lock: &LockInfo) -> serde_json::Value {
    let holders: Vec<_> =
        lock.holders.iter().map(|h| json!({"role": h.role.as_str(), "id": h.id, "ttl_ms": h.ttl.map(ms)})).collect();
    let queue: Vec<_> = lock.queue.iter().map(|w| json!({"id": w.id, "deadline_ms": ms(w.deadline)})).collect();
    let permits_out = (lock.kind == lockkit::LockKind::Semaphore)
        .then(|| lock.holders.iter().filter(|h| h.role == lockkit::HolderRole::Permit).count());
    json!({
        "name": lock.name,
        "held": lock.held,
        "ttl_ms": lock.ttl.map(ms),
        "fence": lock.fence.map(Fence::get),
        "kind": lock.kind.as_str(),
        "holders": holders,
        "owner": lock.owner,
        "permits_out": permits_out,
        "permits": lock.permits,
        "queue": queue,
        "writer_waiting_ms": lock.writer_waiting.map(ms),
        "delay_ms": lock.delay.map(ms),
    })
}

async fn run(cli: Cli) -> lockkit::Result<ExitCode> {
    let url = cli.url.as_deref().unwrap_or(&cli.redis_url);
    let mut builder = LockClient::builder(url).prefix(&cli.prefix).connections(cli.connections);
    if let Command::Acquire { ttl_ms: Some(ttl), .. } = &cli.command {
        builder = builder.default_lease(Duration::from_millis(*ttl));
    }
    let client = match builder.connect().await {
        Ok(client) => client,
        Err(e) if e.is_no_quorum() && matches!(cli.command, Command::Acquire { .. }) => {
            return Ok(no_quorum(&cli.command, &e));
        }
        Err(e) => return Err(e),
    };
    let result = match cli.command {
        Command::Acquire { name, ttl_ms, fixed, wait_ms, hold_ms } => {
            let fixed_lease = ttl_ms.filter(|_| fixed).map(Duration::from_millis);
            acquire(&client, &name, fixed_lease, wait_ms, hold_ms).await
        }
        Command::Inspect { pattern } => {
            for lock in client.inspect(&pattern).await? {
                println!("{}", inspect_line(&lock));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Fence { name, at_least } => {
            let fence = client.ensure_fence_at_least(&name, Fence::new(at_least)).await?;
            println!("{}", json!({"name": name, "fence": fence.get()}));
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench { concurrency, duration_ms, locks, fair } => {
            let duration = Duration::from_millis(duration_ms);
            println!("{}", bench(&client, concurrency.max(1), duration, locks, false).await?);
            if fair {
                println!("{}", bench(&client, concurrency.max(1), duration, locks, true).await?);
            }
            Ok(ExitCode::SUCCESS)
        }
    };
    // A waiter that gave up leaves its place in the background (an etcd or ZooKeeper queue node):
    // let it finish before the process exits, or the node blocks the lock until its lease ends.
    client.flush(FLUSH_WITHIN).await;
    result
}

/// How long lockctl waits for background work (a waiter leaving its place) before exiting.
const FLUSH_WITHIN: Duration = Duration::from_secs(2);

async fn acquire(
    client: &LockClient,
    name: &str,
    fixed_lease: Option<Duration>,
    wait_ms: u64,
    hold_ms: u64,
) -> lockkit::Result<ExitCode> {
    let mut request = client.acquire(name).wait(Duration::from_millis(wait_ms));
    if let Some(lease) = fixed_lease {
        request = request.lease(lease);
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
    let lost = tokio::select! {
        cause = guard.lost() => {
            println!("{}", json!({"event": "lost", "name": name, "cause": format!("{cause:?}")}));
            true
        }
        () = tokio::time::sleep(Duration::from_millis(hold_ms)) => false,
    };
    match guard.release().await {
        Ok(held) => println!("{}", json!({"event": "released", "name": name, "held": held})),
        // Lost already: the servers may still be out of reach; the lock is not ours either way.
        Err(e) if lost => {
            println!("{}", json!({"event": "released", "name": name, "held": false, "error": e.to_string()}))
        }
        Err(e) => return Err(e),
    }
    Ok(ExitCode::SUCCESS)
}

/// An acquire that could not start because too few Redlock nodes answered.
fn no_quorum(command: &Command, e: &lockkit::Error) -> ExitCode {
    let Command::Acquire { name, .. } = command else { unreachable!("only acquire maps no quorum to exit 3") };
    println!("{}", json!({"event": "not_acquired", "name": name, "reason": "no_quorum", "error": e.to_string()}));
    ExitCode::from(NOT_ACQUIRED)
}

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
async fn bench(
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
    // Consecutive grants of one lock: the release of one to the grant of the next.
    grants.sort_unstable_by_key(|g| (g.lock, g.fence));
    let mut handovers: Vec<u64> = grants
        .windows(2)
        .filter(|w| w[0].lock == w[1].lock && w[1].fence == w[0].fence + 1)
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
