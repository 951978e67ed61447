//! `compose-chaos`: the fault rows across containers (see [`chaos::container_rows`]), against a
//! compose stack that `scripts/compose.sh` brought up with `deploy/faults/compose.yml`.
//!
//! Exit status: 0 when every row passed, 1 when one failed, 2 when the rows could not run.

use std::{path::PathBuf, process::ExitCode};

use chaos::{
    container::Container,
    container_rows::{self, ROWS, Stack},
    progress,
    settings::{Budget, Mode},
};
use clap::Parser;

/// Fault rows across the containers of a compose stack.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Shortened rows, as `make test` runs them.
    #[arg(long)]
    bounded: bool,
    /// Run only these rows (comma-separated; `--list` names them).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// List the rows and exit.
    #[arg(long)]
    list: bool,
    /// The compose project (the compose file's `name:`).
    #[arg(long, default_value = "seckill")]
    project: String,
    /// The seckill services and where each is published, `SERVICE=URL`, comma-separated; the
    /// second one is the one the rows hurt.
    #[arg(long, value_delimiter = ',', required_unless_present = "list")]
    instances: Vec<String>,
    /// PostgreSQL as published on loopback.
    #[arg(
        long,
        env = "COMPOSE_CHAOS_DATABASE_URL",
        required_unless_present = "list"
    )]
    database_url: Option<String>,
    /// The Docker client.
    #[arg(long, env = "DOCKER", default_value = "docker")]
    docker: String,
    /// Histories go under this directory.
    #[arg(long, default_value = ".run/compose")]
    work_dir: PathBuf,
    /// Directory of the report files.
    #[arg(long, default_value = ".run/compose")]
    out_dir: PathBuf,
    /// Report file names without extension.
    #[arg(long, default_value = "chaos-containers")]
    prefix: String,
    /// The commit under test, for the report.
    #[arg(long)]
    commit: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if args.list {
        for row in &ROWS {
            println!("{}", row.name);
        }
        return ExitCode::SUCCESS;
    }
    let rows: Vec<_> = ROWS
        .iter()
        .filter(|row| args.only.is_empty() || args.only.iter().any(|n| n == row.name))
        .copied()
        .collect();
    if let Some(unknown) = args
        .only
        .iter()
        .find(|n| !ROWS.iter().any(|r| &r.name == n))
    {
        eprintln!("unknown row {unknown:?}; --list shows them");
        return ExitCode::from(2);
    }
    match run(&args, &rows).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            progress!("the rows could not run: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: &Args, rows: &[container_rows::Row]) -> anyhow::Result<bool> {
    let mut containers = Vec::new();
    for instance in &args.instances {
        let (service, url) = instance
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--instances takes SERVICE=URL, not {instance:?}"))?;
        containers.push(Container::find(&args.docker, &args.project, service, url).await?);
    }
    anyhow::ensure!(
        containers.len() > container_rows::TARGET + 1,
        "the rows need at least three instances (one hurt, two carrying on)"
    );
    let stack = Stack {
        containers,
        database_url: args.database_url.clone().unwrap_or_default(),
        data_network: format!("{}_data", args.project),
        locks_network: format!("{}_locks", args.project),
        work_dir: args.work_dir.clone(),
    };
    let (mode, label) = if args.bounded {
        (Mode::Bounded, "containers-bounded")
    } else {
        (Mode::Full, "containers-full")
    };
    let report = container_rows::run_all(
        rows,
        &stack,
        Budget::for_mode(mode),
        label,
        (&args.out_dir, &args.prefix),
        args.commit.clone(),
    )
    .await?;
    Ok(report.passed)
}
