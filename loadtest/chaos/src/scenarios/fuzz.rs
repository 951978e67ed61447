//! `fuzz`: bad input at scale. Schemathesis generates requests from the service's own
//! `/openapi.json` (valid and invalid ones, admin routes included) against one instance, for a
//! bounded number of examples per operation. The requests tried and the 5xx seen are counted on
//! the server side (`seckill_http_requests_total` before and after), so the figures do not depend
//! on schemathesis' output format. A 5xx other than the documented 503 fails the scenario; so does
//! any sale left inconsistent in PostgreSQL.

use std::{collections::BTreeMap, path::Path, process::Stdio};

use anyhow::{Context, Result};
use tokio::process::Command;

use crate::{
    api::Api,
    checker::{self, Snapshot},
    environment::Environment,
    harness::FENCED,
    processes::seckill::{ADMIN_TOKEN, Instance, sum_labelled},
    progress,
    report::{Check, ScenarioReport},
    settings::{Budget, Mode},
};

const DESCRIPTION: &str = "Bad input at scale: schemathesis fuzzes every operation of /openapi.json (admin routes included) against one instance; no 5xx other than the documented 503, and every sale stays consistent in PostgreSQL.";

/// Orders placed before fuzzing, so the audited sale has history.
const SEED_ORDERS: usize = 20;

/// Runs the scenario.
pub(crate) async fn run(env: &mut Environment, budget: &Budget) -> ScenarioReport {
    let mut report = ScenarioReport::new("fuzz", Some(FENCED), DESCRIPTION);
    progress!("scenario fuzz (schemathesis)");
    let mut instance = None;
    if let Err(e) = execute(env, budget, &mut instance, &mut report).await {
        progress!("  scenario fuzz broke: {e:#}");
        report.error = Some(format!("{e:#}"));
    }
    if let Some(instance) = instance.as_mut()
        && let Err(e) = instance.stop().await
    {
        report
            .evidence
            .push(format!("stopping the instance: {e:#}"));
    }
    report
}

async fn execute(
    env: &mut Environment,
    budget: &Budget,
    slot: &mut Option<Instance>,
    report: &mut ScenarioReport,
) -> Result<()> {
    let st = env.config.schemathesis.clone().context(
        "schemathesis (st) is not installed: scripts/chaos.sh installs it into .run/chaos/venv",
    )?;
    let instance = slot.insert(
        env.start_instance(&env.instance_spec("fuzz", budget), "fuzz")
            .await?,
    );
    let api = Api::new(&instance.base_url(), budget.request_timeout)?;
    let sku = format!("chaos-fuzz-{:08x}", rand::random::<u32>());
    api.put_sale(&sku, &budget.sale, FENCED).await?;
    for i in 0..SEED_ORDERS {
        api.order(&sku, &format!("user-{i}"), 1, &format!("{sku}-seed-{i}"))
            .await;
    }
    let db = env.db().await?;
    let started_at: std::time::SystemTime = db.query_one("SELECT now()", &[]).await?.get(0);

    let before = api.metrics_text().await?;
    let seed = fuzz_seed(budget.mode);
    let log = env.log_dir().join("fuzz-schemathesis.log");
    let fuzz_dir = env.work_dir().join("fuzz");
    std::fs::create_dir_all(&fuzz_dir)?;
    progress!(
        "  schemathesis: {} examples per operation, seed {seed}",
        budget.fuzz_examples
    );
    let exit = schemathesis(&st, &instance.base_url(), budget, seed, &fuzz_dir, &log).await?;
    let after = api.metrics_text().await?;

    // The scrape taken before is itself counted once it has been answered.
    let requests =
        (requests_by_status(&after, |_| true) - requests_by_status(&before, |_| true) - 1.0)
            .max(0.0) as u64;
    let server_errors = (requests_by_status(&after, is_server_error)
        - requests_by_status(&before, is_server_error)) as u64;
    let unavailable = (requests_by_status(&after, |s| s == "503")
        - requests_by_status(&before, |s| s == "503")) as u64;
    let by_status = status_delta(&before, &after);
    report.requests = requests;
    report.figure("requests_by_status", serde_json::to_value(&by_status)?);
    report.figure("schemathesis_exit_code", exit.code);
    report.figure("schemathesis_seed", seed);
    report.figure("examples_per_operation", budget.fuzz_examples);

    // Every sale the fuzzer created or touched, and ours, audited straight from PostgreSQL.
    let skus: Vec<String> = db
        .query(
            "SELECT sku FROM sales WHERE created_at >= $1 OR sku = $2 ORDER BY sku",
            &[&started_at, &sku],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut db = db;
    let mut bad_sales = Vec::new();
    for s in &skus {
        let snapshot = Snapshot::load(&mut db, s).await?;
        let f = checker::check(&[], &[], &[], &snapshot, false);
        let broken = f.oversold
            + (f.negative_shards
                + f.inconsistent_shards
                + f.partial_orders
                + f.users_over_limit
                + f.purchase_mismatches) as i64;
        if broken > 0 {
            bad_sales.push(format!("{s}: {:?}", f.examples));
        }
        if s == &sku {
            report.acknowledged = snapshot.orders.len() as u64;
            report.oversold = f.oversold;
            report.duplicates = f.duplicates as u64;
        }
    }
    report.figure("sales_audited", skus.len());

    report.checks = vec![
        Check::new(
            "fuzz_requests_sent",
            requests > 0,
            format!("{requests} requests answered ({unavailable} of them 503)"),
        ),
        Check::new(
            "no_server_errors",
            server_errors == 0,
            format!("{server_errors} answers 5xx other than 503"),
        ),
        Check::new(
            "audit_consistent",
            bad_sales.is_empty(),
            format!(
                "{} sales audited, {} inconsistent or oversold",
                skus.len(),
                bad_sales.len()
            ),
        ),
        Check::new(
            "instance_survived",
            instance.is_alive(),
            "the fuzzed instance is still running",
        ),
        Check::new(
            "schemathesis_finished",
            !exit.timed_out,
            if exit.timed_out {
                "killed at the time cap"
            } else {
                "finished within the time cap"
            },
        ),
    ];
    report.evidence.extend(bad_sales.into_iter().take(5));
    if server_errors > 0 || exit.code != Some(0) {
        report.evidence.extend(exit.tail);
        report
            .evidence
            .extend(instance.log_lines(&["ERROR", "panicked", "internal error"], 10));
    }
    progress!(
        "  fuzz: {requests} requests, {server_errors} server errors, {} sales audited",
        skus.len()
    );
    Ok(())
}

/// How schemathesis ended.
struct Exit {
    code: Option<i32>,
    timed_out: bool,
    /// Its last output lines (the summary).
    tail: Vec<String>,
}

/// Runs `st run` against `base`, bounded by the budget's examples and time cap.
async fn schemathesis(
    st: &Path,
    base: &str,
    budget: &Budget,
    seed: u64,
    dir: &Path,
    log: &Path,
) -> Result<Exit> {
    let out = std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
    let mut child = Command::new(st)
        .args(["run", &format!("{base}/openapi.json")])
        .args([
            "--max-examples",
            &budget.fuzz_examples.to_string(),
            "--seed",
            &seed.to_string(),
        ])
        .args([
            "--checks",
            "not_a_server_error",
            "--workers",
            "1",
            "--request-timeout",
            "10",
        ])
        .args(["--header", &format!("Authorization: Bearer {ADMIN_TOKEN}")])
        .args(["--generation-database", "none", "--no-color"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("start {}", st.display()))?;
    let (code, timed_out) = match tokio::time::timeout(budget.fuzz_time_cap, child.wait()).await {
        Ok(status) => (status?.code(), false),
        Err(_) => {
            child.kill().await.ok();
            (None, true)
        }
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(15)..]
        .iter()
        .map(|l| format!("schemathesis: {l}"))
        .collect();
    Ok(Exit {
        code,
        timed_out,
        tail,
    })
}

/// A fixed seed for the bounded run (reproducible CI), a fresh one for the full run (more ground
/// covered over time; it is reported, so a failure can be replayed). `CHAOS_FUZZ_SEED` overrides.
fn fuzz_seed(mode: Mode) -> u64 {
    if let Some(seed) = std::env::var("CHAOS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return seed;
    }
    match mode {
        Mode::Bounded => 20_250_101,
        Mode::Full => rand::random::<u32>().into(),
    }
}

fn is_server_error(status: &str) -> bool {
    status.starts_with('5') && status != "503"
}

fn requests_by_status(metrics: &str, keep: impl Fn(&str) -> bool) -> f64 {
    sum_labelled(metrics, "seckill_http_requests_total", "status", keep)
}

fn status_delta(before: &str, after: &str) -> BTreeMap<String, u64> {
    let mut statuses: Vec<String> = Vec::new();
    for text in [before, after] {
        for line in text
            .lines()
            .filter(|l| l.starts_with("seckill_http_requests_total{"))
        {
            if let Some(start) = line.find("status=\"") {
                let rest = &line[start + 8..];
                if let Some(end) = rest.find('"') {
                    statuses.push(rest[..end].to_owned());
                }
            }
        }
    }
    statuses.sort();
    statuses.dedup();
    statuses
        .into_iter()
        .map(|s| {
            let n = requests_by_status(after, |x| x == s) - requests_by_status(before, |x| x == s);
            (s, n.max(0.0) as u64)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}
