//! What a plan works with while it injects: [`FaultRun`] (record a fault, hold it, run it in
//! rounds, reach the shared servers and the instances) and [`Probe`] (the sale's state mid-run).
//! The run itself (when the plan injects, what follows) lives in `execute`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::{
    environment::Environment,
    faultproxy::{FaultProxy, Mode},
    history::Clock,
    processes::seckill::{Instance, InstanceSpec},
    progress,
    report::FaultEvent,
    settings::Budget,
};

/// What a probe of the sale shows mid-run.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    /// `seckill_fence_rejections(sku)`: claims, writes and batches refused by fences.
    pub fence_rejections: i64,
    /// Shards whose remaining stock plus units sold from them, less the returns folded back into
    /// them, differs from their initial stock.
    pub inconsistent_shards: i64,
    /// Units sold beyond the total.
    pub oversold: i64,
    /// Units left over all shards (negative ones count as 0).
    pub remaining: i64,
    /// Units in orders that hold them (not cancelled or expired).
    pub sold: i64,
    /// `lockkit_leases_lost_total` per instance (0 for an instance that cannot answer now).
    pub leases_lost: Vec<f64>,
    /// `lockkit_late_grants_total` per instance: grants answered after their lease was over,
    /// which lockkit undoes instead of handing out (0 for an instance that cannot answer now).
    pub late_grants: Vec<f64>,
}

impl Probe {
    /// The sale's stock as PostgreSQL has it now, without the instances' counters.
    pub async fn stock(db: &tokio_postgres::Client, sku: &str) -> Result<Self> {
        let row = db.query_one(PROBE_SQL, &[&sku]).await?;
        Ok(Self {
            fence_rejections: row.get(0),
            inconsistent_shards: row.get(1),
            oversold: row.get(2),
            remaining: row.get(3),
            sold: row.get(4),
            leases_lost: Vec::new(),
            late_grants: Vec::new(),
        })
    }

    /// Whether the stock is visibly corrupted.
    pub fn violated(&self) -> bool {
        self.inconsistent_shards > 0 || self.oversold > 0
    }
}

/// What a plan works with while it injects.
pub struct FaultRun<'a> {
    /// Shared servers (Redis and PostgreSQL can be killed and restarted).
    pub env: &'a mut Environment,
    /// The instances; faults hit [`TARGET`](super::TARGET).
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

impl<'a> FaultRun<'a> {
    /// A run of the fault phase, which ends `budget.fault_phase_cap` from now.
    pub(super) fn new(
        env: &'a mut Environment,
        instances: &'a mut [Instance],
        budget: &'a Budget,
        sku: &'a str,
        specs: &'a [InstanceSpec],
        label: &'a str,
        clock: Clock,
    ) -> Self {
        Self {
            env,
            instances,
            budget,
            sku,
            specs,
            label,
            clock,
            faults: Vec::new(),
            db: None,
            deadline: Instant::now() + budget.fault_phase_cap,
            rounds_run: 0,
        }
    }

    /// The faults recorded so far, handed over (none are left behind).
    pub(super) fn take_faults(&mut self) -> Vec<FaultEvent> {
        std::mem::take(&mut self.faults)
    }

    /// Fault rounds run so far, over every call of [`rounds`](Self::rounds) and its variants.
    pub(super) fn rounds_run(&self) -> u32 {
        self.rounds_run
    }
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

    /// One outage recorded as fault `action` on `instance` (`None`: all): `stop` breaks something,
    /// the fault is held for `length` (or less, if the fault phase cap is near), `restart` brings
    /// it back, and the fault is recorded healed. If `stop` or `restart` fails, the fault stays
    /// open and the error is returned.
    pub async fn outage(
        &mut self,
        action: impl Into<String>,
        instance: Option<usize>,
        length: Duration,
        stop: impl AsyncFnOnce(&mut Self) -> Result<()>,
        restart: impl AsyncFnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        let fault = self.begin(action, instance);
        stop(self).await?;
        self.hold(length).await;
        restart(self).await?;
        self.healed(fault);
        Ok(())
    }

    /// `kill -9` the suite's Redis (every key, lock and fence counter gone) and restart it empty
    /// after `down`, recorded as one fault described by `what` (the pid and `down` are added).
    pub async fn lose_redis(&mut self, what: &str, down: Duration) -> Result<()> {
        let pid = self.env.redis.pid().unwrap_or_default();
        self.outage(
            format!(
                "kill -9 redis (pid {pid}){what}, restart empty after {} ms",
                down.as_millis()
            ),
            None,
            down,
            async |run: &mut Self| run.env.redis.kill9().await,
            async |run: &mut Self| run.env.redis.restart().await,
        )
        .await
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
        let mut probe = match Probe::stock(db, self.sku).await {
            Ok(probe) => probe,
            Err(e) => {
                self.db = None; // reconnect next time (e.g. PostgreSQL restarted)
                return Err(e);
            }
        };
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
            probe.leases_lost.push(counter("lockkit_leases_lost_total"));
            probe.late_grants.push(counter("lockkit_late_grants_total"));
        }
        Ok(probe)
    }

    /// Blackholes `proxy` for `length`, then lets the held bytes through, recorded as a fault
    /// `action` on `instance`.
    pub async fn blackhole(
        &mut self,
        proxy: &FaultProxy,
        action: String,
        instance: usize,
        length: Duration,
    ) -> Result<()> {
        self.link_fault(proxy, Mode::Blackhole, action, instance, length)
            .await
    }

    /// Puts `proxy` in `mode` for `length`, then back to passing, recorded as a fault `action` on
    /// `instance`.
    pub async fn link_fault(
        &mut self,
        proxy: &FaultProxy,
        mode: Mode,
        action: String,
        instance: usize,
        length: Duration,
    ) -> Result<()> {
        self.outage(
            action,
            Some(instance),
            length,
            async |_: &mut Self| {
                proxy.set_mode(mode);
                Ok(())
            },
            async |_: &mut Self| {
                proxy.set_mode(Mode::Pass);
                Ok(())
            },
        )
        .await
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
    SELECT seckill_fence_rejections(sa.sku),
           (SELECT COUNT(*) FROM shards s WHERE s.sku = $1 AND s.remaining
                + COALESCE((SELECT SUM(p.quantity) FROM order_parts p WHERE p.sku = $1 AND p.shard = s.shard), 0)
                - COALESCE((SELECT SUM(r.quantity) FROM stock_returns r
                             WHERE r.sku = $1 AND r.shard = s.shard AND r.applied_fence IS NOT NULL), 0) <> s.initial),
           GREATEST(held.units - sa.total, 0)::bigint,
           (SELECT COALESCE(SUM(GREATEST(remaining, 0)), 0) FROM shards WHERE sku = $1)::bigint,
           held.units::bigint
      FROM sales sa,
           (SELECT COALESCE(SUM(quantity), 0) AS units FROM orders
             WHERE sku = $1 AND state IN ('reserved', 'paid')) held
     WHERE sa.sku = $1";
