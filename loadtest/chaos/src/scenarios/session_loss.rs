//! `session-loss@zk`, `@etcd`, `@postgres`: instance `b` reaches the lock server only through the
//! suite's [`FaultProxy`] (its data still goes straight to PostgreSQL). Each round blackholes that
//! link for longer than the lease, then heals it: `b`'s ZooKeeper session expires, its etcd lease
//! runs out, its lease row expires. `b` cannot renew, so its watchdog reports the leases lost;
//! `a` is granted the shards and sells; whatever `b` had in flight carries an older fence and is
//! refused. Nothing may be oversold or lost. (On Redis, `partition` is this scenario.)

use anyhow::{Context, Result};

use crate::{
    environment::Environment,
    faultproxy::FaultProxy,
    harness::{FENCED, FaultPlan, FaultRun, RunOutcome, TARGET},
    lock_backend::LockBackend,
    processes::seckill::InstanceSpec,
    report::Check,
};

/// Cuts the target instance off its lock server, in rounds.
#[derive(Default)]
pub(crate) struct SessionLoss {
    proxy: Option<FaultProxy>,
}

impl FaultPlan for SessionLoss {
    fn name(&self) -> &'static str {
        "session-loss"
    }

    fn description(&self) -> &'static str {
        "Cut instance b off the lock server (fault proxy: blackhole) for longer than its lease or session timeout, then heal; b reports its leases lost, a takes the shards over, b's late writes are fenced out, nothing is oversold or lost."
    }

    fn strategy(&self) -> &'static str {
        FENCED
    }

    async fn prepare(&mut self, _env: &Environment, specs: &mut [InstanceSpec]) -> Result<()> {
        let target = &mut specs[TARGET];
        let url = target
            .lock_url
            .clone()
            .context("session-loss runs on a lock server other than Redis")?;
        let server = LockBackend::server(&url).context("no loopback server in the lock URL")?;
        let proxy =
            FaultProxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), server).await?;
        target.lock_url = LockBackend::via(&url, proxy.addr());
        self.proxy = Some(proxy);
        Ok(())
    }

    async fn inject(&mut self, run: &mut FaultRun<'_>) -> Result<()> {
        let proxy = self.proxy.as_ref().context("prepare() starts the proxy")?;
        let length = run.budget.fault_length;
        let name = run.instances[TARGET].name().to_owned();
        run.rounds(
            |probe| probe.leases_lost.get(TARGET).copied().unwrap_or(0.0) > 0.0,
            async |run: &mut FaultRun<'_>, _| {
                let action = format!(
                    "blackhole {name} <-> lock server for {} ms",
                    length.as_millis()
                );
                run.blackhole(proxy, action, TARGET, length).await
            },
        )
        .await?;
        Ok(())
    }

    fn heal(&mut self) {
        if let Some(proxy) = &self.proxy {
            proxy.set_mode(crate::faultproxy::Mode::Pass);
        }
    }

    fn expectations(&self, outcome: &RunOutcome<'_>) -> Vec<Check> {
        let lost = outcome
            .probe
            .leases_lost
            .get(TARGET)
            .copied()
            .unwrap_or(0.0);
        vec![Check::new(
            "stale_leases_caught",
            lost > 0.0,
            format!(
                "lockkit_leases_lost_total = {lost} on the cut-off instance after {} round(s)",
                outcome.rounds
            ),
        )]
    }

    fn notable_log_lines(&self) -> &'static [&'static str] {
        &["lease lost", "session"]
    }
}
