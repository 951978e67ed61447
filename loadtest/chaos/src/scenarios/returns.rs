//! The lifecycle rows: a fault plan run on a sale whose orders must be paid within a short window,
//! while the buyers pay some orders, cancel some through either instance and leave the rest to
//! expire (see [`Settling`](crate::settings::Settling)). Returned units must reach the stock
//! exactly once, through the shard's owner or its next claim, whatever the fault does to the
//! owner, the canceller or the sweeper.
//!
//! - `returns-pause`: the owner paused past its lease while returns of its shards are pending; the
//!   next owner's claim must fold them, and the paused one's late batch (which would fold them too)
//!   is refused by its fence.
//! - `sweeper-kill`: `kill -9` an instance while both sweep expirations every 100 ms (an expiry
//!   sweep is one transaction: a killed one leaves its orders to the next sweep of either).
//! - `returns-delay`: a delayed packet on the return path: `b`'s PostgreSQL traffic (its batches,
//!   which fold returns, its cancellations and its sweeps) held past its lease, then delivered.
//! - `returns-control`: `returns-pause` with returns written to the shard's stock directly
//!   (`orders.returns = "direct"`), outside the owner: the owner's next absolute write loses them,
//!   and the checker must see the shards no longer balance, or the suite fails.
//!
//! On top of the shared checks (which, with returns, balance each shard against the returns
//! folded into it and check every payment and cancellation against the order's final state), each
//! row checks that the lifecycle was exercised: units paid, cancelled, expired and folded back.

use anyhow::Result;

use super::{instance_kill::InstanceKill, pause::Pause, pg_link::PgLink};
use crate::{
    environment::Environment,
    harness::{FaultPlan, FaultRun, RunOutcome},
    processes::seckill::InstanceSpec,
    report::Check,
    settings::{Budget, SaleSettings},
};

/// A fault plan run on a lifecycle sale.
pub(crate) struct Returns<P> {
    name: &'static str,
    description: &'static str,
    plan: P,
    /// The control: returns written outside the owner.
    control: bool,
}

impl Returns<Pause> {
    /// `returns-pause`.
    pub(crate) fn pause() -> Self {
        Self {
            name: "returns-pause",
            description: "pause on a lifecycle sale (1.5 s payment window; buyers pay, cancel through either instance, or walk away): b is SIGSTOPped past its lease while returns of its shards are pending; a's claims fold them, b's late batch is fenced out. Every return reaches the stock once, every answered payment or cancellation holds.",
            plan: Pause::fenced(),
            control: false,
        }
    }

    /// `returns-control`.
    pub(crate) fn control() -> Self {
        Self {
            name: "returns-control",
            description: "returns-pause with returns added to the shard's stock outside its owner (orders.returns = direct): the owner's next absolute write loses them, and the checker must see the shards no longer balance, or the suite fails.",
            plan: Pause::fenced(),
            control: true,
        }
    }
}

impl Returns<InstanceKill> {
    /// `sweeper-kill`.
    pub(crate) fn sweeper_kill() -> Self {
        Self {
            name: "sweeper-kill",
            description: "instance-kill on a lifecycle sale: kill -9 b while both instances sweep expired orders every 100 ms, start it again one lease later, sell out. An expiry is one transaction: nothing expired twice or returned twice, nothing lost.",
            plan: InstanceKill,
            control: false,
        }
    }
}

impl Returns<PgLink> {
    /// `returns-delay`.
    pub(crate) fn delay() -> Self {
        Self {
            name: "returns-delay",
            description: "pg-delay on a lifecycle sale: b's PostgreSQL traffic (batches that fold returns, cancellations, expiry sweeps) held past its lease, then delivered late. The late batch is fenced out with the returns it would fold, which a's claim folds instead.",
            plan: PgLink::delay(),
            control: false,
        }
    }
}

impl<P: FaultPlan> FaultPlan for Returns<P> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn description(&self) -> &'static str {
        self.description
    }

    fn strategy(&self) -> &'static str {
        self.plan.strategy()
    }

    fn sale(&self, budget: &Budget) -> SaleSettings {
        SaleSettings {
            payment_window_ms: Some(budget.settling.payment_window_ms),
            ..self.plan.sale(budget)
        }
    }

    async fn prepare(&mut self, env: &Environment, specs: &mut [InstanceSpec]) -> Result<()> {
        self.plan.prepare(env, specs).await?;
        if self.control {
            for spec in specs {
                spec.env
                    .push(("SECKILL_ORDERS__RETURNS".into(), "direct".into()));
            }
        }
        Ok(())
    }

    async fn inject(&mut self, run: &mut FaultRun<'_>) -> Result<()> {
        self.plan.inject(run).await
    }

    fn heal(&mut self) {
        self.plan.heal();
    }

    fn expects_violation(&self) -> bool {
        self.control
    }

    fn expectations(&self, outcome: &RunOutcome<'_>) -> Vec<Check> {
        let mut checks = self.plan.expectations(outcome);
        let lifecycle = &outcome.findings.lifecycle;
        let units = |state: &str| lifecycle.units_by_state.get(state).copied().unwrap_or(0);
        let (paid, cancelled, expired) = (units("paid"), units("cancelled"), units("expired"));
        checks.push(Check::new(
            "lifecycle_exercised",
            paid > 0 && cancelled > 0 && expired > 0 && lifecycle.returns_folded > 0,
            format!(
                "units paid {paid}, reserved {}, cancelled {cancelled}, expired {expired}; returned units folded into the stock {}, pending {}; {} payments and cancellations sent: {:?}",
                units("reserved"),
                lifecycle.returns_folded,
                lifecycle.returns_pending,
                lifecycle.sent,
                lifecycle.outcomes
            ),
        ));
        checks
    }

    fn measures_recovery(&self) -> bool {
        self.plan.measures_recovery()
    }

    fn notable_log_lines(&self) -> &'static [&'static str] {
        self.plan.notable_log_lines()
    }

    fn figures(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.plan.figures()
    }

    fn sells_out(&self) -> bool {
        self.plan.sells_out()
    }
}
