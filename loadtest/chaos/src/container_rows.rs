//! The fault rows across containers: the one-host rows' faults, done by a Docker engine to three
//! seckill containers of the compose stack (`deploy/faults/compose.yml`, run by
//! `scripts/compose.sh`), judged by the same checker and the same shared checks.
//!
//! Each row creates a fresh 20-shard sale, drives the bounded load over all three instances,
//! hurts [`TARGET`] for longer than its 1 s lease, heals, and checks the history against
//! PostgreSQL: lost 0, oversold 0, no write after takeover. A row repeats its fault (up to the
//! budget's rounds) until it sees the fault take effect: another instance claimed shards while the
//! target was cut off, or the target reported a lease lost, or a fence refused it. The control
//! runs the pause against `redis-lock`, the lab's locks without fences, and must be caught.
//!
//! Where the one-host suite holds a proxy's bytes or signals a process, these cut a real
//! interface (`docker network disconnect`) or freeze a cgroup (`docker pause`): the evidence, on
//! separate network stacks, that the proxy stands in for.

use std::{collections::BTreeMap, path::Path, time::Duration};

use anyhow::{Context, Result};
use serde_json::Value;

use crate::{
    api::Api,
    checker::{self, Snapshot},
    container::Container,
    harness::{FENCED, Probe, RunOutcome, drain, recovery, shared_checks, write_history},
    history::{Clock, History},
    load::{Load, LoadSpec},
    processes::postgres,
    progress,
    report::{Check, FaultEvent, ScenarioReport, Status, SuiteReport},
    settings::Budget,
};

/// The instance each row hurts (`seckill-2`); the others carry on and take its shards over.
pub const TARGET: usize = 1;

/// The control's strategy: shard locks without fences.
const CONTROL: &str = "redis-lock";

/// What a row does to [`TARGET`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `docker network disconnect` from the network PostgreSQL is on.
    CutDatabase,
    /// `docker network disconnect` from the network Redis (the shard locks) is on.
    CutLocks,
    /// `docker pause`.
    Pause,
    /// `docker kill` under load (mid-batch: batches commit every few milliseconds), then
    /// `docker start`.
    Kill,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// Its name in the report.
    pub name: &'static str,
    /// What it does.
    pub fault: Fault,
    /// The sale's strategy.
    pub strategy: &'static str,
    /// What it shows, for the report.
    pub description: &'static str,
}

impl Row {
    /// Whether it is the control, which must be caught.
    pub fn is_control(&self) -> bool {
        self.strategy != FENCED
    }
}

/// Every row, in run order.
pub const ROWS: [Row; 5] = [
    Row {
        name: "containers-cut-database",
        fault: Fault::CutDatabase,
        strategy: FENCED,
        description: "docker network disconnect of seckill-2 from PostgreSQL's network past its lease: its batches cannot commit, it gives its shards back, the others take them over; its late writes, if any, meet the fence.",
    },
    Row {
        name: "containers-cut-locks",
        fault: Fault::CutLocks,
        strategy: FENCED,
        description: "docker network disconnect of seckill-2 from Redis' network past its lease: its watchdog cannot renew, it reports the leases lost and stops writing; the others take its shards over.",
    },
    Row {
        name: "containers-pause",
        fault: Fault::Pause,
        strategy: FENCED,
        description: "docker pause of seckill-2 past its lease, then unpause: the others take its shards over, and what it had in flight is refused by the fence.",
    },
    Row {
        name: "containers-kill",
        fault: Fault::Kill,
        strategy: FENCED,
        description: "docker kill of seckill-2 under load (mid-batch), then docker start: every acknowledged order is in PostgreSQL, and the others take its shards over once its leases end.",
    },
    Row {
        name: "containers-control",
        fault: Fault::Pause,
        strategy: CONTROL,
        description: "The pause row against redis-lock (shard locks, no fences): the paused holder's write lands after its lock passed on, and the checker must detect the damage, or the row fails.",
    },
];

/// The stack the rows run on.
#[derive(Debug)]
pub struct Stack {
    /// The seckill containers, [`TARGET`] among them.
    pub containers: Vec<Container>,
    /// PostgreSQL, as published on loopback.
    pub database_url: String,
    /// `PROJECT_data`: the network PostgreSQL is on.
    pub data_network: String,
    /// `PROJECT_locks`: the network Redis is on.
    pub locks_network: String,
    /// Where the histories go.
    pub work_dir: std::path::PathBuf,
}

/// Runs `rows` in order on `stack` with `budget`, and writes `OUT_DIR/PREFIX.{json,md}`; the
/// report says whether every row passed. `mode` names the run in the report.
pub async fn run_all(
    rows: &[Row],
    stack: &Stack,
    budget: Budget,
    mode: &'static str,
    out: (&Path, &str),
    commit: Option<String>,
) -> Result<SuiteReport> {
    let started = std::time::Instant::now();
    let started_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let mut scenarios = Vec::new();
    for row in rows {
        let report = run(row, stack, &budget).await;
        let verdict = match report.status {
            Status::Passed => "passed".to_owned(),
            _ => format!("FAILED: {}", report.failures().join("; ")),
        };
        progress!(
            "{}: {verdict} ({:.1} s)",
            row.name,
            report.duration_ms as f64 / 1000.0
        );
        scenarios.push(report);
    }
    let environment = BTreeMap::from([
        (
            "postgres".to_owned(),
            Value::from(stack.database_url.clone()),
        ),
        (
            "containers".to_owned(),
            Value::from(
                stack
                    .containers
                    .iter()
                    .map(|c| format!("{} at {}", c.name(), c.base_url()))
                    .collect::<Vec<_>>(),
            ),
        ),
        (
            "networks".to_owned(),
            Value::from(vec![
                stack.data_network.clone(),
                stack.locks_network.clone(),
            ]),
        ),
    ]);
    let passed = scenarios.iter().all(|s| s.status == Status::Passed);
    let report = SuiteReport {
        suite: "chaos",
        mode,
        instances: stack.containers.len(),
        started_at,
        duration_ms: started.elapsed().as_millis() as u64,
        commit,
        passed,
        budget,
        environment,
        scenarios,
    };
    let (dir, prefix) = out;
    report.write(dir, prefix)?;
    progress!(
        "wrote {}/{prefix}.json and .md: {}",
        dir.display(),
        if passed { "PASSED" } else { "FAILED" }
    );
    Ok(report)
}

/// Runs `row` on `stack`; a failure ends up in the report, never as a panic.
pub async fn run(row: &Row, stack: &Stack, budget: &Budget) -> ScenarioReport {
    let started = std::time::Instant::now();
    let mut report = ScenarioReport::new(row.name, Some(row.strategy), row.description);
    progress!("scenario {} ({})", row.name, row.strategy);
    if let Err(e) = execute(row, stack, budget, &mut report).await {
        progress!("  scenario {} broke: {e:#}", row.name);
        report.error = Some(format!("{e:#}"));
    }
    if let Err(e) = heal(stack).await {
        report
            .error
            .get_or_insert(format!("could not heal the containers: {e:#}"));
    }
    report.finish(started.elapsed().as_millis() as u64);
    report
}

async fn execute(
    row: &Row,
    stack: &Stack,
    budget: &Budget,
    report: &mut ScenarioReport,
) -> Result<()> {
    let apis = stack
        .containers
        .iter()
        .map(|c| Api::new(c.base_url(), budget.request_timeout))
        .collect::<Result<Vec<_>>>()?;
    let db = postgres::connect(&stack.database_url).await?;
    let sku = format!("{}-{:08x}", row.name, rand::random::<u32>());
    let sale = if row.is_control() {
        budget.control_sale.clone()
    } else {
        budget.sale.clone()
    };
    apis[0].put_sale(&sku, &sale, row.strategy).await?;

    let clock = Clock::start();
    let history = History::new(clock);
    let spec = LoadSpec {
        workers: budget.workers,
        max_requests: budget.max_requests,
        users: sale.users,
        max_per_order: sale.max_per_order,
        replay_fraction: budget.replay_fraction,
        key_prefix: sku.clone(),
        settling: None,
    };
    let load = Load::start(apis.clone(), &sku, spec, history.clone());
    tokio::time::sleep(budget.warmup).await;

    let target = &stack.containers[TARGET];
    let mut faults = Vec::new();
    let mut took_effect = Vec::new();
    let injected = async {
        for round in 1..=budget.max_fault_rounds {
            let before = Effect::read(&db, &apis[TARGET], &sku, target).await?;
            let action = inject(row.fault, stack, budget.fault_length).await?;
            let at_ms = clock.now_ms() - budget.fault_length.as_millis() as u64;
            heal(stack).await?;
            faults.push(FaultEvent {
                action,
                at_ms,
                healed_ms: Some(clock.now_ms()),
                instance: Some(TARGET),
            });
            let effect = if row.is_control() {
                Probe::stock(&db, &sku).await?.violated()
            } else {
                Effect::seen_since(&before, &db, &apis[TARGET], &sku, target, row.fault).await?
            };
            took_effect.push(effect);
            if effect && round >= budget.fault_rounds {
                break;
            }
            tokio::time::sleep(budget.fault_gap).await;
        }
        anyhow::Ok(())
    }
    .await;
    if row.is_control() {
        drain(budget.drain_cap, async || Probe::stock(&db, &sku).await).await;
    } else {
        tokio::time::sleep(budget.settle).await;
    }
    load.stop().await;
    injected.context("injecting faults")?;

    let ops = history.snapshot();
    progress!(
        "  {} operations; resolving the unknown ones through {}",
        ops.len(),
        stack.containers[0].name()
    );
    let resolutions = checker::resolve(&ops, &apis[0], &sku).await;
    let mut db = db;
    let snapshot = Snapshot::load(&mut db, &sku).await?;
    let findings = checker::check(&ops, &resolutions, &[], &snapshot, row.strategy == FENCED);
    let history_file = stack
        .work_dir
        .join("history")
        .join(format!("{}.jsonl", row.name));
    write_history(&history_file, &ops, &[], &resolutions)?;
    report.figure("history_file", history_file.display().to_string());

    let mut alive = Vec::new();
    for container in &stack.containers {
        alive.push((container.name().to_owned(), container.is_up().await));
    }
    let rounds = faults.len() as u32;
    let outcome = RunOutcome {
        findings: &findings,
        probe: &Probe::default(),
        ops: &ops,
        faults: &faults,
        rounds,
        gate: None,
    };
    report.checks = shared_checks(row.strategy, row.is_control(), &outcome, &alive);
    if !row.is_control() {
        report.checks.push(Check::new(
            "fault_took_effect",
            took_effect.iter().any(|&seen| seen),
            format!(
                "rounds where another instance claimed shards while {} was cut off, or it reported leases lost, or a fence refused it: {took_effect:?}",
                target.name()
            ),
        ));
    }
    report.recovery_ms = recovery(&faults, &ops, report);
    report.figure("fault_rounds", rounds);
    report.figure("writes_after_takeover", findings.writes_after_takeover);
    report.figure(
        "status_counts",
        serde_json::to_value(&findings.status_counts)?,
    );
    report.faults = faults;
    report.take_findings(findings);
    if report.checks.iter().any(|c| !c.passed) {
        for container in &stack.containers {
            report.evidence.extend(
                container
                    .log_lines(&["ERROR", "panicked", "internal error"], 4)
                    .await,
            );
        }
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

/// Does `fault` to the target for `length`; returns what was done, for the report.
async fn inject(fault: Fault, stack: &Stack, length: Duration) -> Result<String> {
    let target = &stack.containers[TARGET];
    let name = target.name();
    let ms = length.as_millis();
    let action = match fault {
        Fault::CutDatabase => {
            target.disconnect(&stack.data_network).await?;
            format!(
                "docker network disconnect {} {name} for {ms} ms",
                stack.data_network
            )
        }
        Fault::CutLocks => {
            target.disconnect(&stack.locks_network).await?;
            format!(
                "docker network disconnect {} {name} for {ms} ms",
                stack.locks_network
            )
        }
        Fault::Pause => {
            target.pause().await?;
            format!("docker pause {name} for {ms} ms")
        }
        Fault::Kill => {
            target.kill().await?;
            format!("docker kill {name}, docker start {ms} ms later")
        }
    };
    progress!("  fault: {action}");
    tokio::time::sleep(length).await;
    Ok(action)
}

/// Undoes whatever a row did: every container unpaused, running and on both networks.
async fn heal(stack: &Stack) -> Result<()> {
    for container in &stack.containers {
        if container.is_up().await {
            continue;
        }
        // Paused, or killed: `unpause` fails on a stopped container, `start` on a paused one.
        if container.unpause().await.is_err() {
            container.start().await?;
        }
    }
    for container in &stack.containers {
        for network in [&stack.data_network, &stack.locks_network] {
            // Connecting a container that is on the network already fails, and changes nothing.
            let _ = container.connect(network).await;
        }
        container.wait_ready(Duration::from_secs(60)).await?;
    }
    Ok(())
}

/// The signs that the target lost its shards: a newer claim in PostgreSQL of a shard it owned,
/// its own lease-loss counter, fence refusals.
#[derive(Debug, Clone)]
struct Effect {
    /// The shards the target owned, with its fences (read before the fault).
    owned: Vec<(i32, i64)>,
    leases_lost: f64,
    fence_rejections: i64,
}

impl Effect {
    async fn read(
        db: &tokio_postgres::Client,
        api: &Api,
        sku: &str,
        target: &Container,
    ) -> Result<Self> {
        Ok(Self {
            owned: api.owned_shards(sku).await.unwrap_or_default(),
            leases_lost: target.counter("lockkit_leases_lost_total").await,
            fence_rejections: Probe::stock(db, sku).await?.fence_rejections,
        })
    }

    /// Whether the target's shards changed hands since `before` was read: one of them claimed
    /// under a newer fence, a fence refusal, or (unless the target was killed, which restarts
    /// its counters) a lease it reported lost.
    async fn seen_since(
        before: &Self,
        db: &tokio_postgres::Client,
        api: &Api,
        sku: &str,
        target: &Container,
        fault: Fault,
    ) -> Result<bool> {
        let claims = db
            .query(
                "SELECT shard, fence FROM shard_claims WHERE sku = $1",
                &[&sku],
            )
            .await?;
        let taken_over = claims.iter().any(|claim| {
            let (shard, fence): (i32, i64) = (claim.get(0), claim.get(1));
            before.owned.iter().any(|&(s, f)| s == shard && fence > f)
        });
        let after = Self::read(db, api, sku, target).await?;
        Ok(taken_over
            || after.fence_rejections > before.fence_rejections
            || (fault != Fault::Kill && after.leases_lost > before.leases_lost))
    }
}
