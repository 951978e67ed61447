//! `chaos`: runs the fault-injection suite (see the crate docs). Usually started by
//! `scripts/chaos.sh`, which builds it and the service, installs schemathesis, and cleans up.
//!
//! Exit status: 0 when every applicable scenario passed, 1 when one failed, 2 when the suite
//! could not run at all.

use std::{path::PathBuf, process::ExitCode};

use chaos::{
    environment::EnvConfig,
    progress,
    scenarios::Scenario,
    settings::Mode,
    suite::{self, SuiteOptions},
};
use clap::Parser;

/// Fault-injection suite of seckill and lockkit.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Shortened scenarios (a few seconds each), as `make test` runs them.
    #[arg(long)]
    bounded: bool,
    /// Run only these scenarios (comma-separated); see --list.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
    /// The seckill binary under test.
    #[arg(long, default_value = "target/release/seckill")]
    seckill_bin: PathBuf,
    /// Schemathesis' `st` executable (the fuzz scenario fails without it).
    #[arg(long)]
    schemathesis: Option<PathBuf>,
    /// Working directory: servers, logs, pid files.
    #[arg(long, default_value = ".run/chaos")]
    work_dir: PathBuf,
    /// Directory of the report files.
    #[arg(long, default_value = "loadtest/results")]
    out_dir: PathBuf,
    /// Report file names without extension (default: chaos-latest, or chaos-bounded).
    #[arg(long)]
    prefix: Option<String>,
    /// Port of the suite's own Redis.
    #[arg(long, env = "CHAOS_REDIS_PORT", default_value_t = 6391)]
    redis_port: u16,
    /// Port of the suite's own PostgreSQL.
    #[arg(long, env = "CHAOS_PG_PORT", default_value_t = 5441)]
    pg_port: u16,
    /// The commit under test, for the report.
    #[arg(long)]
    commit: Option<String>,
    /// `zk://` URL of a ZooKeeper for the `@zk` scenarios (not applicable without it).
    #[arg(long, env = "CHAOS_ZOOKEEPER_URL")]
    zookeeper_url: Option<String>,
    /// `etcd://` URL of an etcd for the `@etcd` scenarios (not applicable without it).
    #[arg(long, env = "CHAOS_ETCD_URL")]
    etcd_url: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if args.list {
        for scenario in Scenario::all() {
            println!("{}", scenario.name());
        }
        return ExitCode::SUCCESS;
    }
    let scenarios = if args.only.is_empty() && args.bounded {
        Scenario::bounded_default()
    } else if args.only.is_empty() {
        Scenario::all()
    } else {
        let mut chosen = Vec::new();
        for name in &args.only {
            match Scenario::parse(name) {
                Some(id) => chosen.push(id),
                None => {
                    eprintln!("unknown scenario {name:?}; --list shows them");
                    return ExitCode::from(2);
                }
            }
        }
        Scenario::all()
            .into_iter()
            .filter(|scenario| chosen.contains(scenario))
            .collect()
    };
    let mode = if args.bounded {
        Mode::Bounded
    } else {
        Mode::Full
    };
    // Absolute paths: Redis changes into its directory before opening its log file.
    let (Ok(work_dir), Ok(seckill_bin)) = (
        std::path::absolute(&args.work_dir),
        std::path::absolute(&args.seckill_bin),
    ) else {
        eprintln!("cannot resolve the working directory");
        return ExitCode::from(2);
    };
    let options = SuiteOptions {
        mode,
        scenarios,
        env: EnvConfig {
            work_dir,
            redis_port: args.redis_port,
            pg_port: args.pg_port,
            seckill_bin,
            schemathesis: args
                .schemathesis
                .and_then(|st| std::path::absolute(st).ok()),
            zookeeper_url: args.zookeeper_url,
            etcd_url: args.etcd_url,
        },
        out_dir: args.out_dir,
        prefix: args.prefix.unwrap_or_else(|| {
            format!("chaos-{}", if args.bounded { "bounded" } else { "latest" })
        }),
        commit: args.commit,
    };
    // Ending on a signal drops the suite: its children are killed (kill_on_drop) and the suite's
    // PostgreSQL is stopped by its Drop.
    let outcome = tokio::select! {
        outcome = suite::run(options) => outcome,
        _ = shutdown_signal() => {
            progress!("interrupted; stopping what the suite started");
            return ExitCode::from(130);
        }
    };
    match outcome {
        Ok(report) if report.passed => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            progress!("the suite could not run: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}
