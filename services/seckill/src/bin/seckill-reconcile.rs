//! `seckill-reconcile SKU [--drain]`: reconciles a `redis-gate` sale from the command line with
//! the service's settings (environment, `SECKILL_CONFIG`), through the same code as
//! `POST /v1/sales/{sku}/reconcile`. Prints the report as JSON. Exit 0 repaired, 1 refused or
//! failed, 2 bad usage.

use std::process::ExitCode;

use clap::Parser;
use seckill::{config::Settings, domain::Sku, lab::gate::reconcile::reconcile, store::Db, telemetry};

/// Reconciles a `redis-gate` sale's Redis keys from PostgreSQL, with the service's settings.
#[derive(Debug, Parser)]
#[command(name = "seckill-reconcile", version)]
struct Args {
    /// The sale to reconcile.
    #[arg(value_parser = parse_sku)]
    sku: Sku,
    /// Wait for the sale's queue to drain first, instead of refusing while orders are queued.
    #[arg(long)]
    drain: bool,
}

fn parse_sku(raw: &str) -> Result<Sku, String> {
    Sku::parse(raw)
}

#[tokio::main]
async fn main() -> ExitCode {
    // clap exits with 2 on bad usage, as this tool always did.
    let args = Args::parse();
    telemetry::init_tracing();
    match run(&args.sku, args.drain).await {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("seckill-reconcile: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(sku: &Sku, drain: bool) -> Result<String, String> {
    let settings = Settings::load().map_err(|e| e.to_string())?;
    let db = Db::connect(settings.database_url.expose(), 2, 1, settings.owner_write_bound()).await.map_err(|e| e.to_string())?;
    let client = redis::Client::open(settings.redis_url.expose()).map_err(|e| format!("REDIS_URL: {e}"))?;
    let redis = redis::aio::ConnectionManager::new(client).await.map_err(|e| format!("redis: {e}"))?;
    let sale = db.sale(sku).await.map_err(|e| e.to_string())?.ok_or_else(|| format!("no sale {sku}"))?;
    let report = reconcile(&redis, &db, &sale, drain).await.map_err(|e| e.to_string())?;
    serde_json::to_string_pretty(&report).map_err(|e| e.to_string())
}
