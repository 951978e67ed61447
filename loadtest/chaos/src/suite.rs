//! The suite: start the shared servers, run the selected scenarios in order, write the report,
//! stop everything it started.

use std::{collections::BTreeMap, path::PathBuf, time::Instant};

use anyhow::Result;
use serde_json::Value;

use crate::{
    environment::{EnvConfig, Environment},
    progress,
    report::{Status, SuiteReport, shown_path},
    scenarios::Scenario,
    settings::{Budget, Mode},
};

/// What to run and where to write.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// Full or bounded.
    pub mode: Mode,
    /// Scenarios to run, in suite order (all by default).
    pub scenarios: Vec<Scenario>,
    /// Where the servers and instances run.
    pub env: EnvConfig,
    /// Directory of the report files.
    pub out_dir: PathBuf,
    /// Report files are `PREFIX.json` and `PREFIX.md`.
    pub prefix: String,
    /// Commit under test, for the report.
    pub commit: Option<String>,
}

/// Runs the suite and writes its report; the report says whether it passed.
pub async fn run(options: SuiteOptions) -> Result<SuiteReport> {
    let started = Instant::now();
    let started_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let budget = Budget::for_mode(options.mode);
    let mut env = Environment::start(options.env.clone()).await?;
    let mut scenarios = Vec::new();
    for id in &options.scenarios {
        let report = id.run(&mut env, &budget).await;
        let verdict = match report.status {
            Status::Passed => "passed".to_owned(),
            Status::NotApplicable => "not applicable".to_owned(),
            Status::Failed => format!("FAILED: {}", report.failures().join("; ")),
        };
        progress!(
            "{}: {verdict} ({:.1} s)",
            report.scenario,
            report.duration_ms as f64 / 1000.0
        );
        scenarios.push(report);
    }
    let environment = BTreeMap::from([
        ("redis".to_owned(), Value::from(env.redis.url())),
        ("postgres".to_owned(), Value::from(env.database_url())),
        (
            "seckill_bin".to_owned(),
            Value::from(shown_path(&options.env.seckill_bin)),
        ),
    ]);
    if let Err(e) = env.stop().await {
        progress!("stopping the servers: {e:#}");
    }
    let passed = scenarios.iter().all(|s| s.status != Status::Failed);
    let report = SuiteReport {
        suite: "chaos",
        mode: options.mode.as_str(),
        instances: 2,
        started_at,
        duration_ms: started.elapsed().as_millis() as u64,
        commit: options.commit,
        passed,
        budget,
        environment,
        scenarios,
    };
    report.write(&options.out_dir, &options.prefix)?;
    progress!(
        "wrote {}/{}.json and .md: {}",
        options.out_dir.display(),
        options.prefix,
        if passed { "PASSED" } else { "FAILED" }
    );
    Ok(report)
}
