//! `lockctl`: lockkit for operators and benchmarks. Every command prints JSON lines on stdout.
//!
//! ```text
//! lockctl --url URL acquire NAME [--ttl-ms N [--fixed]] [--wait-ms W] [--hold-ms H]
//! lockctl inspect PATTERN   # per lock: name, held, ttl_ms, fence, kind, holders, queue, permits, delay_ms
//! lockctl fence NAME --at-least N
//! lockctl bench [--concurrency C] [--duration-ms D] [--locks K] [--fair]
//! lockctl elect NAME [VALUE] [--ttl-ms N]
//! ```
//!
//! The URL picks the backend: `redis://` (one Redis), `redis+sentinel://h:p,h:p/master-name` (the
//! master that these Sentinels name), `redis+cluster://h:p,h:p` (a cluster's seed nodes),
//! `redlock://h:p,h:p,...` (independent masters), `zk://h:p[,h:p]/chroot` (ZooKeeper),
//! `etcd://h:p[,h:p]` (etcd v3), `postgres://...` (a lease table) or `postgres+advisory://...`
//! (session advisory locks). `--redis-url` (env `REDIS_URL`) is the older spelling of `--url`
//! (env `LOCKKIT_URL`), which wins when both are given.
//!
//! `acquire` behaves the same on every URL: JSON events `acquired` (with its `fence`), `lost` if
//! the lease could not be renewed in time, then `released` (`held: false` after a loss); exit 3
//! when the lock was not acquired within `--wait-ms`. `--ttl-ms N` is the lease the watchdog
//! renews (on ZooKeeper: the session timeout asked for, which the server clamps to between 2 and 20
//! ticks; on etcd: rounded up to whole seconds on the server); with `--fixed` it is not renewed.
//!
//! `elect NAME VALUE` campaigns in the leader election `NAME` (on etcd, the same election as
//! `etcdctl elect NAME`): a `follower` line (with the current leader's value and term, `null`
//! when nobody leads) at each change while another leads, `leader` (with its term) once it
//! leads, then `resigned` on Ctrl-C or SIGTERM (exit 0), or `lost` if the lease could not be
//! renewed in time (exit 4). `elect NAME` only watches: a `follower` line per change, until a
//! signal.

mod acquire;
mod bench;
mod elect;
mod inspect;

use std::{process::ExitCode, time::Duration};

use clap::{Parser, Subcommand};
use lockkit::{Fence, LockClient};
use serde_json::json;

use crate::{
    acquire::{acquire, no_quorum},
    bench::bench,
    elect::elect,
    inspect::inspect_line,
};

#[derive(Parser)]
#[command(
    version,
    about = "Inspect, hold and benchmark lockkit locks on Redis, Redis Sentinel, Redis Cluster, Redlock, ZooKeeper, etcd or PostgreSQL"
)]
struct Cli {
    /// Lock URL: `redis://[user:password@]host:port[/db]`,
    /// `redis+sentinel://[user:password@]host:port,.../master-name`, `redis+cluster://host:port,...`,
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
    /// Connections to spread operations over (default: the backend's, one multiplexed
    /// connection per Redis server, two PostgreSQL sessions).
    #[arg(long)]
    connections: Option<usize>,
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
    /// Campaign in the leader election NAME with VALUE (one JSON line per change: follower,
    /// leader, then resigned on Ctrl-C/SIGTERM or lost), or with no VALUE only watch who leads.
    Elect {
        name: String,
        value: Option<String>,
        /// Lease in ms, renewed by the watchdog every third of it. Default: 30 s.
        #[arg(long)]
        ttl_ms: Option<u64>,
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
    let mut builder = LockClient::builder(url).prefix(&cli.prefix);
    if let Some(connections) = cli.connections {
        builder = builder.connections(connections);
    }
    if let Command::Acquire { ttl_ms: Some(ttl), .. } | Command::Elect { ttl_ms: Some(ttl), .. } = &cli.command {
        builder = builder.default_lease(Duration::from_millis(*ttl));
    }
    let client = match builder.connect().await {
        Ok(client) => client,
        Err(e) => match &cli.command {
            Command::Acquire { name, .. } if e.is_no_quorum() => return Ok(no_quorum(name, &e)),
            _ => return Err(e),
        },
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
        Command::Elect { name, value, .. } => elect(&client, &name, value).await,
    };
    // A waiter that gave up leaves its place in the background (an etcd or ZooKeeper queue node):
    // let it finish before the process exits, or the node blocks the lock until its lease ends.
    client.flush(FLUSH_WITHIN).await;
    result
}

/// How long lockctl waits for background work (a waiter leaving its place) before exiting.
const FLUSH_WITHIN: Duration = Duration::from_secs(2);
