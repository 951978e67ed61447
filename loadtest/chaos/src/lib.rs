//! The chaos suite of seckill and lockkit: it starts its own Redis and PostgreSQL, runs seckill
//! instances on loopback, drives a bounded load whose every operation is recorded Jepsen-style
//! (invoke, then ok / fail / info, with its idempotency key), injects faults on a schedule, and
//! checks the outcome against the recorded history and PostgreSQL.
//!
//! Run it with `make chaos` (full) or `scripts/chaos.sh --bounded` (what `make test` calls).
//!
//! # Layout
//!
//! | module | what lives there |
//! |---|---|
//! | [`settings`] | full and bounded budgets: durations, workers, request caps, the sale |
//! | [`processes`] | the processes the suite owns: Redis, PostgreSQL, seckill instances; signals by PID |
//! | [`environment`] | the servers shared by all scenarios and the seckill binary |
//! | [`faultproxy`] | a userspace TCP proxy that can reset, delay or blackhole connections |
//! | [`api`] | the HTTP client of one seckill instance |
//! | [`container`] | a seckill instance as a container of the compose stack: pause, kill, cut a network |
//! | [`container_rows`] | the fault rows across containers (`scripts/compose.sh`), judged like the one-host rows |
//! | [`history`] | the recorded operations and how a response classifies |
//! | [`load`] | the bounded load: workers pinned to instances, recording the history |
//! | [`settlement`] | the lifecycle rows' payments and cancellations, and how their answers classify |
//! | [`lock_backend`] | where the shard locks live: Redis, ZooKeeper, etcd or PostgreSQL |
//! | [`checker`] | resolving indeterminate operations, then checking history against PostgreSQL |
//! | [`report`] | per-scenario results, `chaos-*.json` and `chaos-*.md` |
//! | [`harness`] | the run every fault scenario shares: the plan trait, the fault run, execution, judging |
//! | [`scenarios`] | one file per scenario |
//! | [`suite`] | the ordered scenario list, the run of all of them, the verdict |

#![forbid(unsafe_code)]

pub mod api;
pub mod checker;
pub mod container;
pub mod container_rows;
pub mod environment;
pub mod faultproxy;
pub mod harness;
pub mod history;
pub mod load;
pub mod lock_backend;
pub mod processes;
pub mod report;
pub mod scenarios;
pub mod settings;
pub mod settlement;
pub mod suite;

/// Prints one progress line to stderr, prefixed with `[chaos +SECONDS]` since the first line.
#[macro_export]
macro_rules! progress {
    ($($arg:tt)*) => {
        $crate::progress_line(format_args!($($arg)*))
    };
}

/// What [`progress!`] calls.
pub fn progress_line(line: std::fmt::Arguments<'_>) {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let elapsed = START.get_or_init(std::time::Instant::now).elapsed();
    eprintln!("[chaos +{:6.1}s] {line}", elapsed.as_secs_f64());
}
