//! `partition`: instance `b` reaches Redis only through the suite's [`FaultProxy`]. Three link
//! faults, each longer than the lock lease:
//!
//! 1. **blackhole** (a partition): nothing crosses the link; `b` answers 503, `a` takes the
//!    shards over; on healing, `b`'s stalled commands reach Redis late;
//! 2. **reset**: every connection of `b` to Redis is reset at once;
//! 3. **slow link**: latency of more than half `b`'s lease each way, so every grant reaches `b`
//!    after its lease must be presumed over: lockkit refuses to hand such a grant out (it undoes
//!    it and counts it in `lockkit_late_grants_total`), and a lease granted just before the link
//!    slowed down is reported lost by the watchdog or the holder's own deadline check. Whatever
//!    `b` then writes must still be fenced.
//!
//! The service holds a shard lock only for its few milliseconds of PostgreSQL work, so a plain
//! partition rarely catches a holder mid-lease (it finds its release failing instead); the slow
//! link is what makes stale leases observable. redis-rs gives up on an answer after
//! 500 ms, so a link slower than that only produces errors: `b` runs with a short lease
//! ([`TARGET_LEASE_MS`]) and the link gets a latency between half that lease and 250 ms.
//! Nothing may be oversold.

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context, Result};

use crate::{
    environment::Environment,
    faultproxy::{FaultProxy, Mode},
    harness::{FaultPlan, FaultRun, RunOutcome, TARGET},
    processes::seckill::InstanceSpec,
    report::Check,
};

/// Lock lease of the partitioned instance: short enough that a slow link outlasts it.
pub(crate) const TARGET_LEASE_MS: u64 = 300;

/// Latency of the slow link, each way: a grant's round trip (360 ms) outlasts the lease, yet stays
/// below redis-rs' 500 ms response timeout.
const SLOW_LINK: Duration = Duration::from_millis(180);

/// Partitions the target instance from Redis, in rounds.
#[derive(Default)]
pub(crate) struct Partition {
    proxy: Option<FaultProxy>,
}

impl FaultPlan for Partition {
    fn name(&self) -> &'static str {
        "partition"
    }

    fn description(&self) -> &'static str {
        "Cut instance b off Redis (userspace fault proxy: blackhole) for longer than the lease, then heal; reset all of b's Redis connections; then slow the link to 180 ms each way, more than half of b's 300 ms lease. b refuses grants that arrive after their lease or reports leases lost, stale holders are fenced out, nothing is oversold."
    }

    async fn prepare(&mut self, env: &Environment, specs: &mut [InstanceSpec]) -> Result<()> {
        let upstream = SocketAddr::from(([127, 0, 0, 1], env.redis.port()));
        let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], 0)), upstream).await?;
        specs[TARGET].redis_url = proxy.redis_url();
        specs[TARGET].service.lock_lease_ms = TARGET_LEASE_MS;
        self.proxy = Some(proxy);
        Ok(())
    }

    async fn inject(&mut self, run: &mut FaultRun<'_>) -> Result<()> {
        let proxy = self.proxy.as_ref().context("prepare() starts the proxy")?;
        let (length, gap) = (run.budget.fault_length, run.budget.fault_gap);
        let name = run.instances[TARGET].name().to_owned();
        run.rounds(
            |_| true,
            async |run: &mut FaultRun<'_>, _| {
                let action = format!("blackhole {name} <-> redis for {} ms", length.as_millis());
                run.blackhole(proxy, action, TARGET, length).await
            },
        )
        .await?;

        run.instant(
            format!("reset every {name} <-> redis connection"),
            Some(TARGET),
        );
        proxy.reset_all();
        run.hold(gap).await;

        let delay = SLOW_LINK;
        let action = format!(
            "delay {name} <-> redis by {} ms each way for {} ms",
            delay.as_millis(),
            length.as_millis()
        );
        run.link_fault(proxy, Mode::Delay(delay), action, TARGET, length)
            .await?;
        run.hold(gap).await;
        Ok(())
    }

    fn heal(&mut self) {
        if let Some(proxy) = &self.proxy {
            proxy.set_mode(Mode::Pass);
        }
    }

    fn expectations(&self, outcome: &RunOutcome<'_>) -> Vec<Check> {
        let target = |counts: &[f64]| counts.get(TARGET).copied().unwrap_or(0.0);
        let lost = target(&outcome.probe.leases_lost);
        let late = target(&outcome.probe.late_grants);
        vec![Check::new(
            "stale_leases_caught",
            lost + late > 0.0,
            format!(
                "lockkit_leases_lost_total = {lost}, lockkit_late_grants_total = {late} on the partitioned instance"
            ),
        )]
    }

    fn notable_log_lines(&self) -> &'static [&'static str] {
        &["lease lost", "answered too late"]
    }

    fn figures(&self) -> Vec<(&'static str, serde_json::Value)> {
        let Some(proxy) = &self.proxy else {
            return Vec::new();
        };
        let stats = proxy.stats();
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        vec![
            ("proxy_connections_accepted", load(&stats.accepted).into()),
            ("proxy_connections_reset", load(&stats.reset).into()),
            ("proxy_bytes_forwarded", load(&stats.bytes).into()),
        ]
    }
}
