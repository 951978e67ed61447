//! `pause`: `SIGSTOP` instance `b` under load for longer than the lock lease, then `SIGCONT`.
//! While it is frozen it owns shards with orders decided in memory; the leases run out, `a`
//! takes the shards over, and when `b` wakes up it must not act on its expired leases: its own
//! deadline check drops the shards before its next batch (a lease reported lost), and a write it
//! had already started carries an older fence than the shards have seen, which PostgreSQL
//! refuses.
//!
//! The same plan, against the unfenced `redis-lock` strategy, is the [`control`](super::control).
//!
//! # The control's database is a few milliseconds away
//!
//! `redis-lock` does damage only when the pause lands between a read of a shard and the write
//! computed from it: a holder paused anywhere else checks its lease when it wakes and stops. On
//! loopback that window lasts a fraction of a millisecond out of each lock hold, and a pause
//! lands in it by chance: the lock backends that hand a lock over slowly (etcd, the PostgreSQL
//! lease table) saw no damage in six pauses in some runs. So the control's `b` reaches
//! PostgreSQL through a [`FaultProxy`] that adds [`CONTROL_DB_LATENCY`] each way, as a database
//! in another zone would. Its read-to-write window is then most of a lock hold, and a pause
//! lands inside one in every round. The latency is no fault: it outlasts nothing, and without a
//! pause the locks still hold.

use std::time::Duration;

use anyhow::{Context, Result};

use super::pg_link::postgres_through_proxy;
use crate::{
    environment::Environment,
    faultproxy::{FaultProxy, Mode},
    harness::{FENCED, FaultPlan, FaultRun, Probe, RunOutcome, TARGET},
    processes::seckill::InstanceSpec,
    report::Check,
    settings::{Budget, SaleSettings},
};

/// The latency each way between the control's `b` and PostgreSQL (see the module doc).
pub(crate) const CONTROL_DB_LATENCY: Duration = Duration::from_millis(5);

/// Pauses the target instance past its lease, in rounds.
pub(crate) struct Pause {
    name: &'static str,
    description: &'static str,
    strategy: &'static str,
    /// The control: expect the stock checks to be violated, and drain the sale to show it.
    control: bool,
    /// The control's link from `b` to PostgreSQL, [`CONTROL_DB_LATENCY`] long.
    remote_database: Option<FaultProxy>,
}

impl Pause {
    /// Against the fenced strategy: late writes must be refused.
    pub(crate) fn fenced() -> Self {
        Self {
            name: "pause",
            description: "SIGSTOP instance b under load for longer than the lock lease, then SIGCONT; a takes its shards over and the fences refuse b's late claims and writes.",
            strategy: FENCED,
            control: false,
            remote_database: None,
        }
    }

    /// Against a strategy without fencing: the checker must catch the damage.
    pub(crate) fn control(strategy: &'static str) -> Self {
        Self {
            name: "control",
            description: "The pause scenario against the redis-lock strategy (locks, no fences), with b's PostgreSQL 5 ms away each way so that a pause lands between a read and its write: b's late writes land over a's, and the checker must detect the oversell / inconsistent shards, or the suite fails.",
            strategy,
            control: true,
            remote_database: None,
        }
    }

    fn effect_seen(&self, probe: &Probe) -> bool {
        if self.control {
            probe.violated()
        } else {
            stale_holder_stopped(probe) > 0.0
        }
    }
}

impl FaultPlan for Pause {
    fn name(&self) -> &'static str {
        self.name
    }

    fn description(&self) -> &'static str {
        self.description
    }

    fn strategy(&self) -> &'static str {
        self.strategy
    }

    fn sale(&self, budget: &Budget) -> SaleSettings {
        if self.control {
            budget.control_sale.clone()
        } else {
            budget.sale.clone()
        }
    }

    async fn prepare(&mut self, env: &Environment, specs: &mut [InstanceSpec]) -> Result<()> {
        if self.control {
            let proxy = postgres_through_proxy(env, &mut specs[TARGET])
                .await
                .context("putting the control's PostgreSQL a few milliseconds away")?;
            proxy.set_mode(Mode::Delay(CONTROL_DB_LATENCY));
            self.remote_database = Some(proxy);
        }
        Ok(())
    }

    async fn inject(&mut self, run: &mut FaultRun<'_>) -> Result<()> {
        let length = run.budget.fault_length;
        let pause = async |run: &mut FaultRun<'_>, _| {
            let target = &run.instances[TARGET];
            let (name, pid) = (target.name().to_owned(), target.pid().unwrap_or_default());
            run.outage(
                format!("SIGSTOP {name} (pid {pid}) for {} ms", length.as_millis()),
                Some(TARGET),
                length,
                async |run: &mut FaultRun<'_>| run.instances[TARGET].pause(),
                async |run: &mut FaultRun<'_>| run.instances[TARGET].resume(),
            )
            .await
        };
        // The control stops at the first detection: its sale is small and soon sold out.
        if self.control {
            run.rounds_until(|probe| self.effect_seen(probe), pause)
                .await?;
        } else {
            run.rounds(|probe| self.effect_seen(probe), pause).await?;
        }
        Ok(())
    }

    fn expects_violation(&self) -> bool {
        self.control
    }

    fn expectations(&self, outcome: &RunOutcome<'_>) -> Vec<Check> {
        if self.control {
            return Vec::new();
        }
        let lost = outcome
            .probe
            .leases_lost
            .get(TARGET)
            .copied()
            .unwrap_or(0.0);
        let refused = outcome.probe.fence_rejections;
        vec![Check::new(
            "stale_holder_stopped",
            stale_holder_stopped(outcome.probe) > 0.0,
            format!(
                "after {} pause(s): {refused} claims/writes refused by fences, {lost} leases reported lost by b",
                outcome.rounds
            ),
        )]
    }
}

/// Evidence that the paused holder did not act on its expired lease: its late writes refused by
/// fences, or its leases reported lost when it woke (the owner's deadline check, before writing).
fn stale_holder_stopped(probe: &Probe) -> f64 {
    probe.fence_rejections as f64 + probe.leases_lost.get(TARGET).copied().unwrap_or(0.0)
}
