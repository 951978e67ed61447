//! What a fault scenario is: the [`FaultPlan`] trait a scenario implements, with its defaults, and
//! the two constants every plan shares ([`TARGET`], [`FENCED`]). How a plan is run lives in
//! `execute`, what it works with while it injects in `fault_run`.

use anyhow::Result;

use super::{FaultRun, RunOutcome};
use crate::{
    environment::Environment,
    processes::seckill::InstanceSpec,
    report::Check,
    settings::{Budget, SaleSettings},
};

/// Index of the instance that faults hit. Instance 0 (`a`) stays healthy and resolves.
pub const TARGET: usize = 1;

/// The strategy every fault scenario runs against: shards owned through their locks, sold from
/// memory, committed in batches guarded by the owner's fence.
pub const FENCED: &str = "owned-shards";

/// A fault scenario run by [`run`](super::run).
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
