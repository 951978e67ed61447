//! Executing a plan: start the instances, create the sale, start the load, let the plan inject,
//! heal, settle or drain, resolve and snapshot, then judge and fill the report. What the plan
//! works with while it injects lives in `fault_run`, the checks in `judge`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{FENCED, FaultPlan, FaultRun, RunOutcome, TARGET, history_file::write_history, judge};
use crate::{
    api::Api,
    checker::{self, Snapshot},
    environment::Environment,
    history::{Clock, History},
    load::{Load, LoadSpec},
    lock_backend::LockBackend,
    processes::seckill::Instance,
    progress,
    report::{ScenarioReport, shown_path},
    scenarios::gate,
    settings::Budget,
};

/// Runs `plan` under load, with the shard locks on `backend`, and reports. Failures end up in the
/// report, never as a panic.
pub async fn run(
    mut plan: impl FaultPlan,
    backend: LockBackend,
    env: &mut Environment,
    budget: &Budget,
) -> ScenarioReport {
    let name = scenario_name(plan.name(), backend);
    let Some(lock_url) = backend.url(env) else {
        let why = format!(
            "no {} server was given to the suite (scripts/chaos.sh starts one)",
            backend.tag()
        );
        return ScenarioReport::not_applicable(&name, plan.description(), &why);
    };
    let mut report = ScenarioReport::new(&name, Some(plan.strategy()), plan.description());
    progress!("scenario {name} ({})", plan.strategy());
    let mut instances = Vec::new();
    let lock_url = (backend != LockBackend::Redis).then_some(lock_url);
    if let Err(e) = execute(
        &mut plan,
        lock_url,
        env,
        budget,
        &mut instances,
        &mut report,
    )
    .await
    {
        progress!("  scenario {name} broke: {e:#}");
        report.error = Some(format!("{e:#}"));
    }
    plan.heal();
    for instance in &mut instances {
        if let Err(e) = instance.stop().await {
            report
                .evidence
                .push(format!("stopping {}: {e:#}", instance.name()));
        }
    }
    if let Err(e) = env.heal().await {
        report
            .error
            .get_or_insert(format!("could not heal the servers: {e:#}"));
    }
    report
}

/// A scenario's name: the plan's, tagged with the lock backend unless it is Redis (`pause@zk`).
pub fn scenario_name(plan: &str, backend: LockBackend) -> String {
    match backend {
        LockBackend::Redis => plan.to_owned(),
        other => format!("{plan}@{}", other.tag()),
    }
}

async fn execute(
    plan: &mut impl FaultPlan,
    lock_url: Option<String>,
    env: &mut Environment,
    budget: &Budget,
    instances: &mut Vec<Instance>,
    report: &mut ScenarioReport,
) -> Result<()> {
    // Logs, history and the sale are named after the scenario (`pause-zk` for `pause@zk`), so
    // that runs of one plan on several backends keep their own files.
    let label = report.scenario.replace('@', "-");
    let label = label.as_str();
    let pg_log = env.postgres.log_position();
    let mut specs = vec![
        env.instance_spec("a", budget),
        env.instance_spec("b", budget),
    ];
    for spec in &mut specs {
        spec.lock_url.clone_from(&lock_url);
    }
    plan.prepare(env, &mut specs).await?;
    for spec in &specs {
        instances.push(env.start_instance(spec, label).await?);
    }
    let apis = instances
        .iter()
        .map(|i| Api::new(&i.base_url(), budget.request_timeout))
        .collect::<Result<Vec<_>>>()?;
    let sku = format!("chaos-{label}-{:08x}", rand::random::<u32>());
    let sale = plan.sale(budget);
    apis[0].put_sale(&sku, &sale, plan.strategy()).await?;

    let clock = Clock::start();
    let history = History::new(clock);
    let spec = LoadSpec::for_sale(budget, &sale, &sku);
    let load = Load::start(apis.clone(), &sku, spec.clone(), history.clone());
    tokio::time::sleep(budget.warmup).await;

    let mut run = FaultRun::new(
        &mut *env,
        instances.as_mut_slice(),
        budget,
        &sku,
        &specs,
        label,
        clock,
    );
    let injected = tokio::time::timeout(
        budget.fault_phase_cap + budget.fault_length,
        plan.inject(&mut run),
    )
    .await;
    plan.heal();
    for instance in run.instances.iter_mut() {
        instance.resume()?;
    }
    run.env.heal().await?;
    let faults = run.take_faults();
    let rounds = run.rounds_run();
    let is_gate = gate::is_gate(plan.strategy());
    if plan.sells_out() && !is_gate {
        let cap = run.budget.drain_cap;
        drain(cap, async || run.probe().await).await;
    } else {
        tokio::time::sleep(budget.settle).await;
    }
    let probe = run.probe().await.unwrap_or_default();
    drop(run);
    load.stop().await;
    match injected {
        Ok(result) => result.context("injecting faults")?,
        Err(_) => anyhow::bail!(
            "the fault phase overran its cap of {:?}",
            budget.fault_phase_cap
        ),
    }
    // The gate's queue, Redis against PostgreSQL, a reconciliation, a sell-out, another one.
    let gate_outcome = if is_gate {
        Some(gate::after_load(env, &apis, &sku, &sale, budget, &history, spec).await?)
    } else {
        None
    };

    let ops = history.snapshot();
    progress!(
        "  {} operations; resolving the unknown ones through instance a",
        ops.len()
    );
    let resolutions = checker::resolve(&ops, &apis[0], &sku).await;
    let mut db = env.db().await?;
    let snapshot = Snapshot::load(&mut db, &sku).await?;
    let settles = history.settles();
    let findings = checker::check(
        &ops,
        &resolutions,
        &settles,
        &snapshot,
        plan.strategy() == FENCED,
    );
    let history_file = env
        .work_dir()
        .join("history")
        .join(format!("{label}.jsonl"));
    write_history(&history_file, &ops, &settles, &resolutions)?;
    report.figure("history_file", shown_path(&history_file));

    let outcome = RunOutcome {
        findings: &findings,
        probe: &probe,
        ops: &ops,
        faults: &faults,
        rounds,
        gate: gate_outcome.as_ref(),
    };
    let alive: Vec<(String, bool)> = instances
        .iter()
        .map(|i| (i.name().to_owned(), i.is_alive()))
        .collect();
    report.checks =
        judge::shared_checks(plan.strategy(), plan.expects_violation(), &outcome, &alive);
    judge::mark_reported_only(&mut report.checks, plan.reported_only());
    report.checks.extend(plan.expectations(&outcome));
    let recovery = judge::recovery(&faults, &ops, report);
    report.recovery_ms = recovery.filter(|_| plan.measures_recovery());
    report.figure("fault_rounds", rounds);
    report.figure("leases_lost", probe.leases_lost.clone());
    report.figure("indeterminate", findings.indeterminate);
    report.figure("equal_fence_successions", findings.equal_fence_successions);
    report.figure("writes_after_takeover", findings.writes_after_takeover);
    report.figure(
        "late_writes",
        serde_json::json!({
            "late": findings.late_writes,
            "refused": findings.late_writes_refused,
            "unopposed": findings.late_writes_unopposed,
            "over_a_newer_owner": findings.late_writes_over_a_newer_owner,
            "refused_within_lease": findings.refused_within_lease,
        }),
    );
    report.figure("fence_order_violations", findings.fence_order_violations);
    report.figure(
        "status_counts",
        serde_json::to_value(&findings.status_counts)?,
    );
    for (name, value) in plan.figures() {
        report.figure(name, value);
    }
    if plan.damage_row() {
        report.figure("damage", gate::damage(&findings, gate_outcome.as_ref()));
    }
    if let Some(g) = &gate_outcome {
        report.figure("gate", serde_json::to_value(g)?);
    }
    report.faults = faults;
    report.take_findings(findings);
    let notable = plan.notable_log_lines();
    if !notable.is_empty() {
        report
            .evidence
            .extend(instances[TARGET].log_lines(notable, 5));
    }
    if report.checks.iter().any(|c| !c.passed) {
        for instance in instances.iter() {
            report
                .evidence
                .extend(instance.log_lines(&["ERROR", "panicked", "internal error"], 4));
        }
        // What PostgreSQL said meanwhile, with SQLSTATEs (fence refusals SK001, the per-user
        // limit SK002, short stock SK003 and duplicate keys 23505 are expected and left out).
        report.evidence.extend(env.postgres.log_lines_since(
            pg_log,
            &["FATAL", "ERROR", "PANIC"],
            &[" SK001 ", " SK002 ", " SK003 ", " 23505 "],
            8,
        ));
    }
    progress!(
        "  {}: {} requests, {} acknowledged, {} lost, oversold {}, stale rejected {}",
        report.scenario,
        report.requests,
        report.acknowledged,
        report.lost,
        report.oversold,
        report.stale_rejected
    );
    Ok(())
}

/// Keeps the load on until the sale is sold out: no stock left, or nothing sold for a second
/// (the service answers `sold_out` from memory once PostgreSQL confirmed it, even if stale writes
/// left phantom stock in the shards); at most `cap`. `probe` reads the sale's state.
pub async fn drain(cap: Duration, mut probe: impl AsyncFnMut() -> Result<super::Probe>) {
    let until = Instant::now() + cap;
    progress!("  draining the sale to sold out");
    let (mut last_sold, mut since) = (-1, Instant::now());
    while Instant::now() < until {
        if let Ok(p) = probe().await {
            if p.remaining == 0
                || (p.sold == last_sold && since.elapsed() >= Duration::from_secs(1))
            {
                break;
            }
            if p.sold != last_sold {
                (last_sold, since) = (p.sold, Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
