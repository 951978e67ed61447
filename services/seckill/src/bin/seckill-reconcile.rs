//! `seckill-reconcile SKU [--drain]`: reconciles a `redis-gate` sale from the command line with
//! the service's settings (environment, `SECKILL_CONFIG`), through the same code as
//! `POST /v1/sales/{sku}/reconcile`. Prints the report as JSON. Exit 0 repaired, 1 refused or
//! failed, 2 bad usage.

use std::process::ExitCode;

use seckill::{config::Settings, domain::Sku, inventory::gate::reconcile::reconcile, store::Db, telemetry};

#[tokio::main]
async fn main() -> ExitCode {
    telemetry::init_tracing();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let drain = args.iter().any(|a| a == "--drain");
    let skus: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let (Some(sku), 1, true) = (skus.first(), skus.len(), args.iter().all(|a| !a.starts_with("--") || a == "--drain")) else {
        eprintln!("usage: seckill-reconcile SKU [--drain]");
        return ExitCode::from(2);
    };
    let sku = match Sku::parse(sku) {
        Ok(sku) => sku,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&sku, drain).await {
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
