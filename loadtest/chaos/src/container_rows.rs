//! The fault rows across containers: the one-host rows' faults, done by a Docker engine to three
//! seckill containers of the compose stack (`deploy/faults/compose.yml`, run by
//! `scripts/compose.sh`), judged by the same checker and the same shared checks.
//!
//! Each row creates a fresh 20-shard sale, drives the bounded load over all three instances,
//! hurts [`TARGET`] for longer than its 1 s lease, heals, and checks the history against
//! PostgreSQL: lost 0, oversold 0, no write after takeover. A row repeats its fault (up to the
//! budget's rounds) until it sees the fault take effect: a shard the target owned before the
//! fault is no longer its own under the same fence, or a fence refused it. The control
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
        // Where, without the credentials.
        (
            "postgres".to_owned(),
            Value::from(stack.database_url.rsplit('@').next().unwrap_or_default()),
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
    let spec = LoadSpec::for_sale(budget, &sale, &sku);
    let load = Load::start(apis.clone(), &sku, spec, history.clone());
    tokio::time::sleep(budget.warmup).await;

    let target = &stack.containers[TARGET];
    let mut faults = Vec::new();
    let (mut rounds, mut took_effect) = (Vec::new(), false);
    let injected = async {
        let max_rounds = if row.is_control() {
            budget.max_container_control_rounds
        } else {
            budget.max_fault_rounds
        };
        for round in 1..=max_rounds {
            let before = Ownership::read(&db, &apis[TARGET], &sku).await?;
            let at_ms = clock.now_ms();
            let action = hurt(row.fault, stack).await?;
            progress!(
                "  fault: {action} for {} ms",
                budget.fault_length.as_millis()
            );
            tokio::time::sleep(budget.fault_length).await;
            heal(stack).await?;
            faults.push(FaultEvent {
                action: format!("{action} for {} ms", budget.fault_length.as_millis()),
                at_ms,
                healed_ms: Some(clock.now_ms()),
                instance: Some(TARGET),
            });
            // The others need a moment to claim what the target gave up, and a restarted target
            // to come back into the sale.
            tokio::time::sleep(budget.fault_gap).await;
            let effect = if row.is_control() {
                let violated = Probe::stock(&db, &sku).await?.violated();
                rounds.push(format!("stock corrupted: {violated}"));
                violated
            } else {
                let after = Ownership::read(&db, &apis[TARGET], &sku).await?;
                let change = after.since(&before);
                rounds.push(change.to_string());
                change.took_effect()
            };
            if effect && round >= budget.fault_rounds {
                took_effect = true;
                break;
            }
            took_effect |= effect;
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
    let outcome = RunOutcome {
        findings: &findings,
        probe: &Probe::default(),
        ops: &ops,
        faults: &faults,
        rounds: faults.len() as u32,
        gate: None,
    };
    report.checks = shared_checks(row.strategy, row.is_control(), &outcome, &alive);
    if !row.is_control() {
        report.checks.push(Check::new(
            "fault_took_effect",
            took_effect,
            format!("{} after each round: {}", target.name(), rounds.join("; ")),
        ));
    }
    report.recovery_ms = recovery(&faults, &ops, report);
    report.figure("fault_rounds", faults.len());
    report.figure("rounds", rounds);
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

/// Does `fault` to the target; returns what was done, for the report.
async fn hurt(fault: Fault, stack: &Stack) -> Result<String> {
    let target = &stack.containers[TARGET];
    let name = target.name();
    Ok(match fault {
        Fault::CutDatabase => {
            target.disconnect(&stack.data_network).await?;
            format!("docker network disconnect {} {name}", stack.data_network)
        }
        Fault::CutLocks => {
            target.disconnect(&stack.locks_network).await?;
            format!("docker network disconnect {} {name}", stack.locks_network)
        }
        Fault::Pause => {
            target.pause().await?;
            format!("docker pause {name}")
        }
        Fault::Kill => {
            target.kill().await?;
            format!("docker kill {name} (then docker start)")
        }
    })
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

/// What the target owned at one moment, and the fence refusals so far.
#[derive(Debug, Clone)]
struct Ownership {
    /// Its shards, with the fence it claimed each with.
    owned: Vec<(i32, i64)>,
    /// Every claim of the sale's shards so far: shard and fence.
    claims: Vec<(i32, i64)>,
    fence_rejections: i64,
}

impl Ownership {
    async fn read(db: &tokio_postgres::Client, api: &Api, sku: &str) -> Result<Self> {
        let claims = db
            .query(
                "SELECT shard, fence FROM shard_claims WHERE sku = $1",
                &[&sku],
            )
            .await?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        Ok(Self {
            // A target that cannot answer owns nothing it could act on.
            owned: api.owned_shards(sku).await.unwrap_or_default(),
            claims,
            fence_rejections: Probe::stock(db, sku).await?.fence_rejections,
        })
    }

    /// What changed from `before` to `self`.
    fn since(&self, before: &Self) -> Change {
        let newer_claim = |&(shard, fence): &(i32, i64)| {
            self.claims.iter().any(|&(s, f)| s == shard && f > fence)
        };
        Change {
            owned: before.owned.len(),
            given_up: before
                .owned
                .iter()
                .filter(|o| !self.owned.contains(o))
                .count(),
            claimed_anew: before.owned.iter().filter(|o| newer_claim(o)).count(),
            refused: self.fence_rejections - before.fence_rejections,
        }
    }
}

/// How a round changed the target's hold on its shards.
#[derive(Debug, Clone, Copy)]
struct Change {
    /// Shards it owned before the fault.
    owned: usize,
    /// ... that it no longer owns under the same fence (lost, given back, or gone with it).
    given_up: usize,
    /// ... that someone (another instance, or it once restarted) claimed under a newer fence.
    claimed_anew: usize,
    /// Its claims and writes the fences refused meanwhile.
    refused: i64,
}

impl Change {
    /// The fault did what it is for: the target's hold on its shards ended.
    fn took_effect(&self) -> bool {
        self.given_up > 0 || self.refused > 0
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "owned {} shards, gave up {}, {} claimed anew under a newer fence, {} refused by fences",
            self.owned, self.given_up, self.claimed_anew, self.refused
        )
    }
}
