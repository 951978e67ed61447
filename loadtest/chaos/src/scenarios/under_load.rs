//! The run every fault scenario shares:
//!
//! 1. start two instances, `a` and `b` (a plan may reroute `b`, e.g. through a fault proxy);
//! 2. create a fresh sale with the plan's strategy;
//! 3. start the load (half the client tasks on each instance) and let it warm up;
//! 4. let the plan inject its faults, always on `b` or on a shared server, in rounds: at least
//!    `fault_rounds`, more (up to `max_fault_rounds`) while the effect it expects is not seen yet;
//! 5. heal everything, let the load settle (or, for the control, drain the sale to sold out);
//! 6. stop the load, resolve unknown operations through `a`, check against PostgreSQL;
//! 7. judge: the safety checks (or, for the control, that a violation was detected), liveness
//!    checks, and the plan's own expectations.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::{
    api::Api,
    checker::{self, Findings, Snapshot},
    environment::Environment,
    faultproxy::{FaultProxy, Mode},
    history::{Clock, History, Op, Outcome},
    load::{Load, LoadSpec},
    lock_backend::LockBackend,
    processes::seckill::{Instance, InstanceSpec},
    progress,
    report::{Check, FaultEvent, ScenarioReport},
    scenarios::gate::{self, GateOutcome},
    settings::{Budget, SaleSettings},
};

/// Index of the instance that faults hit. Instance 0 (`a`) stays healthy and resolves.
pub const TARGET: usize = 1;

/// The strategy every fault scenario runs against: shards owned through their locks, sold from
/// memory, committed in batches guarded by the owner's fence.
pub const FENCED: &str = "owned-shards";

/// A fault scenario run by [`run`].
#[allow(async_fn_in_trait)]
pub trait FaultPlan {
    /// Name in reports.
    fn name(&self) -> &'static str;

    /// One sentence for the report.
    fn description(&self) -> &'static str;

    /// The sale's strategy.
    fn strategy(&self) -> &'static str {
        FENCED
    }

    /// The sale.
    fn sale(&self, budget: &Budget) -> SaleSettings {
        budget.sale.clone()
    }

    /// Adjusts the instances before they start (e.g. points `b` at a fault proxy).
    async fn prepare(&mut self, _env: &Environment, _specs: &mut [InstanceSpec]) -> Result<()> {
        Ok(())
    }

    /// Injects the faults while the load runs.
    async fn inject(&mut self, run: &mut FaultRun<'_>) -> Result<()>;

    /// Undoes whatever the plan itself keeps broken; runs even if `inject` failed.
    fn heal(&mut self) {}

    /// Whether the run expects the stock checks to be *violated* (the control).
    fn expects_violation(&self) -> bool {
        false
    }

    /// Checks of this scenario on top of the shared ones.
    fn expectations(&self, outcome: &RunOutcome<'_>) -> Vec<Check>;

    /// Whether the time to the first sale after a fault means something here (not when sales
    /// never stop during the fault).
    fn measures_recovery(&self) -> bool {
        true
    }

    /// Log lines worth quoting in the report even when everything passed (e.g. `lease lost`).
    fn notable_log_lines(&self) -> &'static [&'static str] {
        &[]
    }

    /// Figures of this scenario for the report.
    fn figures(&self) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }

    /// Shared checks whose failure is the damage this scenario exists to show (the `redis-gate`
    /// rows): they are reported, not judged; the plan's expectations judge that the damage was
    /// detected.
    fn reported_only(&self) -> &'static [&'static str] {
        &[]
    }

    /// Whether the sale is drained to sold out after the faults (and its stock must all sell).
    fn sells_out(&self) -> bool {
        self.expects_violation()
    }

    /// Whether the report's damage table has a row for this scenario.
    fn damage_row(&self) -> bool {
        false
    }
}

/// What a probe of the sale shows mid-run.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    /// `sales.fence_rejections`.
    pub fence_rejections: i64,
    /// Shards whose remaining stock plus units sold from them differs from their initial stock.
    pub inconsistent_shards: i64,
    /// Units sold beyond the total.
    pub oversold: i64,
    /// Units left over all shards (negative ones count as 0).
    pub remaining: i64,
    /// Units in orders.
    pub sold: i64,
    /// `lockkit_leases_lost_total` per instance (0 for an instance that cannot answer now).
    pub leases_lost: Vec<f64>,
    /// `lockkit_late_grants_total` per instance: grants answered after their lease was over,
    /// which lockkit undoes instead of handing out (0 for an instance that cannot answer now).
    pub late_grants: Vec<f64>,
}

impl Probe {
    /// Whether the stock is visibly corrupted.
    pub fn violated(&self) -> bool {
        self.inconsistent_shards > 0 || self.oversold > 0
    }
}

/// What a plan works with while it injects.
pub struct FaultRun<'a> {
    /// Shared servers (Redis and PostgreSQL can be killed and restarted).
    pub env: &'a mut Environment,
    /// The instances; faults hit [`TARGET`].
    pub instances: &'a mut [Instance],
    /// The budget.
    pub budget: &'a Budget,
    /// The sale under load.
    pub sku: &'a str,
    /// How each instance was started.
    pub specs: &'a [InstanceSpec],
    label: &'a str,
    clock: Clock,
    faults: Vec<FaultEvent>,
    db: Option<tokio_postgres::Client>,
    deadline: Instant,
    rounds_run: u32,
}

impl FaultRun<'_> {
    /// Milliseconds since the scenario started.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Records the start of a fault on `instance` (`None`: all); returns its index.
    pub fn begin(&mut self, action: impl Into<String>, instance: Option<usize>) -> usize {
        let action = action.into();
        progress!("  fault: {action}");
        self.faults.push(FaultEvent {
            action,
            at_ms: self.now_ms(),
            healed_ms: None,
            instance,
        });
        self.faults.len() - 1
    }

    /// Records that fault `index` healed now.
    pub fn healed(&mut self, index: usize) {
        self.faults[index].healed_ms = Some(self.now_ms());
    }

    /// Records an instantaneous fault.
    pub fn instant(&mut self, action: impl Into<String>, instance: Option<usize>) {
        let index = self.begin(action, instance);
        self.healed(index);
    }

    /// `kill -9` the suite's Redis (every key, lock and fence counter gone) and restart it empty
    /// after `down`, recorded as one fault described by `what` (the pid and `down` are added).
    pub async fn lose_redis(&mut self, what: &str, down: Duration) -> Result<()> {
        let pid = self.env.redis.pid().unwrap_or_default();
        let fault = self.begin(
            format!(
                "kill -9 redis (pid {pid}){what}, restart empty after {} ms",
                down.as_millis()
            ),
            None,
        );
        self.env.redis.kill9().await?;
        self.hold(down).await;
        self.env.redis.restart().await?;
        self.healed(fault);
        Ok(())
    }

    /// Holds a fault for `d` (or less, if the fault phase cap is near).
    pub async fn hold(&self, d: Duration) {
        let left = self.deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(d.min(left)).await;
    }

    /// One fault made of volleys: records `action` (hitting all instances), runs `volley` every
    /// `every` for the budget's fault length, then records the fault healed.
    pub async fn volleys(
        &mut self,
        action: String,
        every: Duration,
        mut volley: impl AsyncFnMut() -> Result<()>,
    ) -> Result<()> {
        let fault = self.begin(action, None);
        let until = (Instant::now() + self.budget.fault_length).min(self.deadline);
        let (mut sent, mut failed, mut last_error) = (0u32, 0u32, None);
        while Instant::now() < until {
            sent += 1;
            // One slow volley (a loaded machine) must not end the scenario: count it, go on.
            if let Err(e) = volley().await {
                failed += 1;
                last_error = Some(e);
            }
            tokio::time::sleep(every).await;
        }
        self.healed(fault);
        match last_error {
            Some(e) if failed == sent => Err(e.context(format!("all {sent} volleys failed"))),
            Some(e) => {
                progress!("  {failed} of {sent} volleys failed (last: {e:#})");
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Starts instance `index` again per its spec with `env` added, on its old port (its clients
    /// carry on). The old process must have exited.
    pub async fn restart_instance(&mut self, index: usize, env: &[(&str, &str)]) -> Result<()> {
        let mut spec = self.specs[index].clone();
        spec.port = Some(self.instances[index].port());
        spec.env
            .extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        self.instances[index] = self.env.start_instance(&spec, self.label).await?;
        Ok(())
    }

    /// The Redis keys of the sale's shard locks: `{lockkit:seckill:SKU:N}` for `N < shards`.
    pub fn shard_lock_keys(&self, shards: u32) -> Vec<String> {
        (0..shards)
            .map(|n| format!("{{lockkit:seckill:{}:{n}}}", self.sku))
            .collect()
    }

    /// A plain connection to the suite's Redis, standing in for an operator or a failover.
    pub async fn raw_redis(&self) -> Result<redis::aio::MultiplexedConnection> {
        // Patient: a volley stuck behind a busy Redis is late, not lost.
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(5)));
        Ok(redis::Client::open(self.env.redis.url())?
            .get_multiplexed_async_connection_with_config(&config)
            .await?)
    }

    /// Reads the sale's state from PostgreSQL and the instances' lease-loss counters.
    pub async fn probe(&mut self) -> Result<Probe> {
        if self.db.is_none() {
            self.db = Some(self.env.db().await?);
        }
        let db = self.db.as_ref().context("no database connection")?;
        let row = db.query_one(PROBE_SQL, &[&self.sku]).await;
        let row = match row {
            Ok(row) => row,
            Err(e) => {
                self.db = None; // reconnect next time (e.g. PostgreSQL restarted)
                return Err(e.into());
            }
        };
        let mut leases_lost = Vec::with_capacity(self.instances.len());
        let mut late_grants = Vec::with_capacity(self.instances.len());
        for instance in self.instances.iter() {
            let metrics = if instance.is_paused() {
                None
            } else {
                instance.metrics().await.ok()
            };
            let counter = |name: &str| {
                metrics
                    .as_ref()
                    .and_then(|m| m.get(name).copied())
                    .unwrap_or(0.0)
            };
            leases_lost.push(counter("lockkit_leases_lost_total"));
            late_grants.push(counter("lockkit_late_grants_total"));
        }
        Ok(Probe {
            fence_rejections: row.get(0),
            inconsistent_shards: row.get(1),
            oversold: row.get(2),
            remaining: row.get(3),
            sold: row.get(4),
            leases_lost,
            late_grants,
        })
    }

    /// Blackholes `proxy` for `length`, then lets the held bytes through, recorded as a fault
    /// `action` on `instance`.
    pub async fn blackhole(
        &mut self,
        proxy: &FaultProxy,
        action: String,
        instance: usize,
        length: Duration,
    ) {
        let fault = self.begin(action, Some(instance));
        proxy.set_mode(Mode::Blackhole);
        self.hold(length).await;
        proxy.set_mode(Mode::Pass);
        self.healed(fault);
    }

    /// Runs `fault` in rounds: at least `fault_rounds`, then more (up to `max_fault_rounds`)
    /// while `observed` does not hold yet, with `fault_gap` between rounds and never past the
    /// fault phase cap. Returns the rounds run.
    pub async fn rounds(
        &mut self,
        observed: impl Fn(&Probe) -> bool,
        fault: impl AsyncFnMut(&mut Self, u32) -> Result<()>,
    ) -> Result<u32> {
        let min = self.budget.fault_rounds;
        self.rounds_between(min, observed, fault).await
    }

    /// [`rounds`](Self::rounds), but at least `min` of them whatever the budget says.
    pub async fn rounds_at_least(
        &mut self,
        min: u32,
        observed: impl Fn(&Probe) -> bool,
        fault: impl AsyncFnMut(&mut Self, u32) -> Result<()>,
    ) -> Result<u32> {
        let min = min.max(self.budget.fault_rounds);
        self.rounds_between(min, observed, fault).await
    }

    /// Runs `fault` until `observed` holds (at least once, at most `max_fault_rounds` times).
    pub async fn rounds_until(
        &mut self,
        observed: impl Fn(&Probe) -> bool,
        fault: impl AsyncFnMut(&mut Self, u32) -> Result<()>,
    ) -> Result<u32> {
        self.rounds_between(1, observed, fault).await
    }

    async fn rounds_between(
        &mut self,
        min: u32,
        observed: impl Fn(&Probe) -> bool,
        mut fault: impl AsyncFnMut(&mut Self, u32) -> Result<()>,
    ) -> Result<u32> {
        let (max, gap) = (self.budget.max_fault_rounds.max(min), self.budget.fault_gap);
        let mut round = 0;
        while round < max && Instant::now() < self.deadline {
            round += 1;
            self.rounds_run += 1;
            fault(self, round).await?;
            self.hold(gap).await;
            if round >= min {
                match self.probe().await {
                    Ok(probe) if observed(&probe) => break,
                    Ok(_) => progress!("  expected effect not seen yet after round {round}"),
                    Err(e) => progress!("  probe failed ({e:#}); going on"),
                }
            }
        }
        Ok(round)
    }
}

const PROBE_SQL: &str = "
    SELECT sa.fence_rejections,
           (SELECT COUNT(*) FROM shards s WHERE s.sku = $1 AND s.remaining + COALESCE(
                (SELECT SUM(p.quantity) FROM order_parts p WHERE p.sku = $1 AND p.shard = s.shard), 0) <> s.initial),
           GREATEST((SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE sku = $1) - sa.total, 0)::bigint,
           (SELECT COALESCE(SUM(GREATEST(remaining, 0)), 0) FROM shards WHERE sku = $1)::bigint,
           (SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE sku = $1)::bigint
      FROM sales sa WHERE sa.sku = $1";

/// What a plan's expectations are judged on.
pub struct RunOutcome<'a> {
    /// The checker's findings.
    pub findings: &'a Findings,
    /// The final probe.
    pub probe: &'a Probe,
    /// The history.
    pub ops: &'a [Op],
    /// Faults as injected.
    pub faults: &'a [FaultEvent],
    /// Fault rounds run.
    pub rounds: u32,
    /// `redis-gate` sales: the queue, Redis against PostgreSQL, and the reconciliations.
    pub gate: Option<&'a GateOutcome>,
}

impl RunOutcome<'_> {
    /// Operations that completed while a fault was active, by outcome label.
    pub fn completed_during_faults(&self, keep: impl Fn(&Outcome) -> bool) -> usize {
        self.ops
            .iter()
            .filter(|op| {
                let (Some(done), Some(outcome)) = (op.completed_ms, &op.outcome) else {
                    return false;
                };
                keep(outcome)
                    && self
                        .faults
                        .iter()
                        .any(|f| f.at_ms <= done && f.healed_ms.is_none_or(|h| done <= h))
            })
            .count()
    }
}

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
    let spec = LoadSpec {
        workers: budget.workers,
        max_requests: budget.max_requests,
        users: sale.users,
        max_per_order: sale.max_per_order,
        replay_fraction: budget.replay_fraction,
        key_prefix: sku.clone(),
    };
    let load = Load::start(apis.clone(), &sku, spec.clone(), history.clone());
    tokio::time::sleep(budget.warmup).await;

    let mut run = FaultRun {
        env: &mut *env,
        instances: instances.as_mut_slice(),
        budget,
        sku: &sku,
        specs: &specs,
        label,
        clock,
        faults: Vec::new(),
        db: None,
        deadline: Instant::now() + budget.fault_phase_cap,
        rounds_run: 0,
    };
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
    let faults = std::mem::take(&mut run.faults);
    let rounds = run.rounds_run;
    let is_gate = gate::is_gate(plan.strategy());
    if plan.sells_out() && !is_gate {
        drain(&mut run).await;
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
    let findings = checker::check(&ops, &resolutions, &snapshot, plan.strategy() == FENCED);
    let history_file = env
        .work_dir()
        .join("history")
        .join(format!("{label}.jsonl"));
    write_history(&history_file, &ops, &resolutions)?;
    report.figure("history_file", history_file.display().to_string());

    let outcome = RunOutcome {
        findings: &findings,
        probe: &probe,
        ops: &ops,
        faults: &faults,
        rounds,
        gate: gate_outcome.as_ref(),
    };
    report.checks = shared_checks(plan, &outcome, instances);
    let reported = plan.reported_only();
    for check in report.checks.iter_mut() {
        if reported.contains(&check.name.as_str()) {
            check.detail = format!(
                "reported, not judged (the damage this scenario shows): {}{}",
                if check.passed { "" } else { "VIOLATED: " },
                check.detail
            );
            check.passed = true;
        }
    }
    report.checks.extend(plan.expectations(&outcome));
    let recovery = recovery(&faults, &ops, report);
    report.recovery_ms = recovery.filter(|_| plan.measures_recovery());
    report.figure("fault_rounds", rounds);
    report.figure("leases_lost", probe.leases_lost.clone());
    report.figure("indeterminate", findings.indeterminate);
    report.figure("equal_fence_successions", findings.equal_fence_successions);
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
/// left phantom stock in the shards); at most the drain cap.
async fn drain(run: &mut FaultRun<'_>) {
    let until = Instant::now() + run.budget.drain_cap;
    progress!("  draining the sale to sold out");
    let (mut last_sold, mut since) = (-1, Instant::now());
    while Instant::now() < until {
        if let Ok(p) = run.probe().await {
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

/// The checks every fault scenario must pass, and the stock checks (which the control must fail).
fn shared_checks(
    plan: &impl FaultPlan,
    outcome: &RunOutcome<'_>,
    instances: &[Instance],
) -> Vec<Check> {
    let f = outcome.findings;
    let mut checks = vec![
        Check::new(
            "load_made_progress",
            f.acknowledged > 0,
            format!(
                "{} orders acknowledged of {} requests",
                f.acknowledged, f.requests
            ),
        ),
        Check::new(
            "no_lost_acknowledged",
            f.lost == 0 && f.mismatched == 0,
            format!(
                "{} acknowledged orders missing, {} stored differently",
                f.lost, f.mismatched
            ),
        ),
        Check::new(
            "no_duplicates",
            f.duplicates == 0,
            format!("{} duplicate orders", f.duplicates),
        ),
        Check::new(
            "no_phantoms",
            f.phantoms == 0 && f.unknown_orders == 0,
            format!(
                "{} failed operations happened anyway, {} orders under unknown keys",
                f.phantoms, f.unknown_orders
            ),
        ),
        Check::new(
            "no_partial_orders",
            f.partial_orders == 0,
            format!("{} orders whose parts do not add up", f.partial_orders),
        ),
        Check::new(
            "per_user_limit",
            f.users_over_limit == 0 && f.purchase_mismatches == 0,
            format!(
                "{} users over the limit, {} user_purchases rows off",
                f.users_over_limit, f.purchase_mismatches
            ),
        ),
        Check::new(
            "indeterminate_resolved",
            f.unresolved == 0,
            format!(
                "{} unknown outcomes: {} had happened, {} had not, {} placed on re-send, {} unresolved",
                f.indeterminate,
                f.resolved_happened,
                f.resolved_not_happened,
                f.resolved_placed_now,
                f.unresolved
            ),
        ),
        Check::new(
            "no_server_errors",
            f.server_errors == 0,
            format!("{} answers 5xx other than 503", f.server_errors),
        ),
        Check::new(
            "replays_answer_the_original",
            f.replay_mismatches == 0,
            format!("{} replays answered otherwise", f.replay_mismatches),
        ),
        Check::new(
            "instances_survived",
            instances.iter().all(Instance::is_alive),
            instances
                .iter()
                .map(|i| {
                    format!(
                        "{}: {}",
                        i.name(),
                        if i.is_alive() { "alive" } else { "DEAD" }
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        ),
    ];
    let unrecovered: Vec<&str> = outcome
        .faults
        .iter()
        .filter(|fault| {
            fault.healed_ms.is_some() && first_after(fault, outcome.ops, answers_normally).is_none()
        })
        .map(|fault| fault.action.as_str())
        .collect();
    checks.push(Check::new(
        "recovered_after_each_fault",
        unrecovered.is_empty(),
        if unrecovered.is_empty() {
            "a 201 (or, once sold out, a 409 sold_out) followed every healed fault".to_owned()
        } else {
            format!("no 201 or sold_out after: {}", unrecovered.join("; "))
        },
    ));
    let stock = format!(
        "sold {} of {}, oversold {}, {} shards negative, {} shards inconsistent ({} units of phantom stock)",
        f.sold, f.total, f.oversold, f.negative_shards, f.inconsistent_shards, f.phantom_stock
    );
    if plan.expects_violation() {
        let detected = f.oversold > 0 || f.negative_shards > 0 || f.inconsistent_shards > 0;
        checks.push(Check::new("violation_detected", detected, stock));
    } else {
        checks.push(Check::new(
            "not_oversold",
            f.oversold == 0 && f.negative_shards == 0,
            stock.clone(),
        ));
        checks.push(Check::new(
            "shards_consistent",
            f.inconsistent_shards == 0,
            stock,
        ));
        // No check that commits on a shard follow their fences: the claim and the write's
        // `fence = t` predicate make an older fence after a newer one impossible by construction,
        // so such a check could not fail. The counts stay figures (see `fence_order_violations`).
    }
    checks
}

/// A new order placed.
pub(crate) fn placed(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Ok { status: 201, .. })
}

/// A new order placed, or refused because the sale is sold out: the service works normally.
fn answers_normally(outcome: &Outcome) -> bool {
    placed(outcome) || matches!(outcome, Outcome::Fail { status: 409, code } if code == "sold_out")
}

/// Time from the start of `fault` to the first operation that completed after it healed (on its
/// instance, if it hit one) with an outcome that `counts`.
fn first_after(fault: &FaultEvent, ops: &[Op], counts: fn(&Outcome) -> bool) -> Option<u64> {
    let healed = fault.healed_ms?;
    ops.iter()
        .filter(|op| fault.instance.is_none_or(|i| op.invocation.instance == i))
        .filter(|op| op.outcome.as_ref().is_some_and(counts))
        .filter_map(|op| op.completed_ms.filter(|&done| done >= healed))
        .min()
        .map(|done| done - fault.at_ms)
}

/// The worst recovery over the faults; each one's also goes into the report's figures.
fn recovery(faults: &[FaultEvent], ops: &[Op], report: &mut ScenarioReport) -> Option<u64> {
    let each: Vec<Option<u64>> = faults
        .iter()
        .filter(|f| f.healed_ms.is_some())
        .map(|f| first_after(f, ops, placed))
        .collect();
    report.figure("recovery_ms_each", each.clone());
    each.into_iter().flatten().max()
}

/// Writes the history as JSON lines: every operation (`invoked_ms`, `completed_ms`, `outcome`,
/// `key`, ...), then every resolution of an unknown one (`{"resolution": ...}`).
fn write_history(
    path: &std::path::Path,
    ops: &[Op],
    resolutions: &[checker::Resolved],
) -> Result<()> {
    use std::io::Write as _;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?,
    );
    for op in ops {
        serde_json::to_writer(&mut out, op)?;
        out.write_all(b"\n")?;
    }
    for resolved in resolutions {
        serde_json::to_writer(&mut out, &serde_json::json!({ "resolution": resolved }))?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}
