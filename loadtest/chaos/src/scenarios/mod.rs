//! The scenarios, one file each. Those that inject faults under load implement
//! [`FaultPlan`](crate::harness::FaultPlan) and share one run ([`harness::run`]), which lives in
//! [`crate::harness`]: start two instances, create a sale, drive the load, inject, heal, resolve,
//! check (`redis-gate` sales also reconcile and sell out, see `gate`). The others (`fuzz`,
//! `lock_tokens`, `redlock`) are self-contained. Nothing shared by several scenarios lives here.
//!
//! A [`Scenario`] is a plan and the [`LockBackend`] the instances keep their shard locks on:
//! every plan runs on Redis, and `pause`, `session-loss` and `control` also on ZooKeeper, etcd and
//! PostgreSQL (`pause@zk`, ...).

mod control;
mod early_expiry;
mod fuzz;
pub(crate) mod gate;
mod instance_kill;
mod lock_tokens;
mod partition;
mod pause;
mod pg_link;
mod pg_restart;
mod redis_loss;
mod redlock;
mod returns;
mod session_loss;
mod stale_failover;

use std::time::Instant;

use returns::Returns;

use crate::{
    environment::Environment, harness, lock_backend::LockBackend, report::ScenarioReport,
    settings::Budget,
};

/// Every scenario, in the order the suite runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScenarioId {
    /// SIGSTOP one instance past its lease under load; fences refuse its late writes.
    Pause,
    /// `kill -9` Redis mid-load, restart it empty; the service re-seeds fences by itself.
    RedisLoss,
    /// Cut one instance off Redis (fault proxy) past its lease, then heal.
    Partition,
    /// `pg_ctl -m fast stop`, then start, mid-load.
    PgRestart,
    /// Hold one instance's PostgreSQL traffic past its lease, then deliver it: the late batch is
    /// refused by the fence.
    PgDelay,
    /// Blackhole one instance's PostgreSQL traffic: the other takes its shards over and sells.
    PgBlackhole,
    /// Expire the shard lock keys from outside, repeatedly (a Redis clock jump).
    EarlyExpiry,
    /// Failover to a replica one write behind: lock keys gone, fence counters one lower.
    StaleFailover,
    /// lockkit's Redlock on 5 nodes: a minority killed, restarted empty, frozen; no two holders,
    /// fences in real-time order; disjoint majorities as the control.
    Redlock,
    /// `pause` against the unfenced `redis-lock` strategy: must be caught overselling.
    Control,
    /// `kill -9` one instance mid-load (`owned-shards`), restart it: no damage, sells out.
    InstanceKill,
    /// `redis-gate`: `kill -9` Redis with orders in the stream; the damage must be detected.
    GateRedisLoss,
    /// `redis-gate-durable` under the same fault: no acknowledged order lost.
    GateRedisLossDurable,
    /// `redis-gate`: an instance aborts right after the script that decided and enqueued an
    /// order, before answering (failpoint); nothing may be lost or undersold.
    GateFailpoint,
    /// `pg-delay` against `owned-unfenced`: must be caught overselling.
    PgDelayControl,
    /// Bad input at scale: schemathesis against the OpenAPI document.
    Fuzz,
    /// lockkit: a forged or stale token can neither release nor extend a lock.
    LockTokens,
    /// Cut one instance off its lock server (ZooKeeper, etcd, PostgreSQL) past its session or
    /// lease: its leases are reported lost, its late writes fenced out.
    SessionLoss,
    /// `pause` on a lifecycle sale: the owner paused past its lease while returns are pending.
    ReturnsPause,
    /// `instance-kill` on a lifecycle sale: an instance killed while both sweep expirations.
    SweeperKill,
    /// `pg-delay` on a lifecycle sale: a delayed packet on the return path.
    ReturnsDelay,
    /// `returns-pause` with returns written outside the owner: must be caught losing units.
    ReturnsControl,
}

impl ScenarioId {
    /// Every scenario, in run order.
    pub const ALL: [ScenarioId; 22] = [
        Self::Pause,
        Self::RedisLoss,
        Self::Partition,
        Self::PgRestart,
        Self::PgDelay,
        Self::PgBlackhole,
        Self::EarlyExpiry,
        Self::StaleFailover,
        Self::Redlock,
        Self::Control,
        Self::PgDelayControl,
        Self::InstanceKill,
        Self::GateRedisLoss,
        Self::GateRedisLossDurable,
        Self::GateFailpoint,
        Self::ReturnsPause,
        Self::SweeperKill,
        Self::ReturnsDelay,
        Self::ReturnsControl,
        Self::Fuzz,
        Self::LockTokens,
        Self::SessionLoss,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::RedisLoss => "redis-loss",
            Self::Partition => "partition",
            Self::PgRestart => "pg-restart",
            Self::PgDelay => "pg-delay",
            Self::PgBlackhole => "pg-blackhole",
            Self::PgDelayControl => "pg-delay-control",
            Self::EarlyExpiry => "early-expiry",
            Self::StaleFailover => "stale-failover",
            Self::Redlock => "redlock",
            Self::Control => "control",
            Self::InstanceKill => "instance-kill",
            Self::GateRedisLoss => "gate-redis-loss",
            Self::GateRedisLossDurable => "gate-redis-loss-durable",
            Self::GateFailpoint => "gate-failpoint",
            Self::Fuzz => "fuzz",
            Self::LockTokens => "lock-tokens",
            Self::SessionLoss => "session-loss",
            Self::ReturnsPause => "returns-pause",
            Self::SweeperKill => "sweeper-kill",
            Self::ReturnsDelay => "returns-delay",
            Self::ReturnsControl => "returns-control",
        }
    }

    /// Whether the plan runs on lock backends other than Redis.
    fn on_coordination_backends(self) -> bool {
        matches!(self, Self::Pause | Self::SessionLoss | Self::Control)
    }
}

/// A plan and the lock backend its instances keep their shard locks on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// The plan.
    pub id: ScenarioId,
    /// Where the shard locks live.
    pub backend: LockBackend,
}

impl Scenario {
    /// Every scenario, in the order the suite runs them: each plan on Redis (but `session-loss`,
    /// which is `partition` there), then `pause`, `session-loss` and `control` on each other
    /// backend.
    pub fn all() -> Vec<Scenario> {
        let on_redis = ScenarioId::ALL
            .into_iter()
            .filter(|id| *id != ScenarioId::SessionLoss)
            .map(|id| Scenario {
                id,
                backend: LockBackend::Redis,
            });
        let elsewhere = LockBackend::COORDINATION.into_iter().flat_map(|backend| {
            ScenarioId::ALL
                .into_iter()
                .filter(|id| id.on_coordination_backends())
                .map(move |id| Scenario { id, backend })
        });
        on_redis.chain(elsewhere).collect()
    }

    /// What a bounded run (`make test`) runs by default: every scenario but the controls on the
    /// backends other than Redis. Their fenced rows stay, and the controls on Redis show that
    /// the checker sees an oversell; `make chaos` runs them all.
    pub fn bounded_default() -> Vec<Scenario> {
        Self::all()
            .into_iter()
            .filter(|s| s.backend == LockBackend::Redis || s.id != ScenarioId::Control)
            .collect()
    }

    /// The name used on the command line and in reports (`pause`, `pause@zk`).
    pub fn name(self) -> String {
        harness::scenario_name(self.id.name(), self.backend)
    }

    /// Looks a scenario up by name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::all().into_iter().find(|s| s.name() == name)
    }

    /// Runs the scenario; never panics on a failure, which ends up in the report.
    pub async fn run(self, env: &mut Environment, budget: &Budget) -> ScenarioReport {
        let started = Instant::now();
        let on = self.backend;
        let mut report = match self.id {
            ScenarioId::Pause => harness::run(pause::Pause::fenced(), on, env, budget).await,
            ScenarioId::RedisLoss => harness::run(redis_loss::RedisLoss, on, env, budget).await,
            ScenarioId::Partition => {
                harness::run(partition::Partition::default(), on, env, budget).await
            }
            ScenarioId::PgRestart => harness::run(pg_restart::PgRestart, on, env, budget).await,
            ScenarioId::PgDelay => harness::run(pg_link::PgLink::delay(), on, env, budget).await,
            ScenarioId::PgBlackhole => {
                harness::run(pg_link::PgLink::blackhole(), on, env, budget).await
            }
            ScenarioId::PgDelayControl => {
                harness::run(pg_link::PgLink::delay_control(), on, env, budget).await
            }
            ScenarioId::EarlyExpiry => {
                harness::run(early_expiry::EarlyExpiry::default(), on, env, budget).await
            }
            ScenarioId::StaleFailover => {
                harness::run(stale_failover::StaleFailover::default(), on, env, budget).await
            }
            ScenarioId::Redlock => redlock::run(env, budget).await,
            ScenarioId::Control => harness::run(control::plan(), on, env, budget).await,
            ScenarioId::InstanceKill => {
                harness::run(instance_kill::InstanceKill, on, env, budget).await
            }
            ScenarioId::GateRedisLoss => {
                harness::run(gate::GatePlan::redis_loss(), on, env, budget).await
            }
            ScenarioId::GateRedisLossDurable => {
                harness::run(gate::GatePlan::redis_loss_durable(), on, env, budget).await
            }
            ScenarioId::GateFailpoint => {
                harness::run(gate::GatePlan::failpoint(), on, env, budget).await
            }
            ScenarioId::SessionLoss => {
                harness::run(session_loss::SessionLoss::default(), on, env, budget).await
            }
            ScenarioId::ReturnsPause => harness::run(Returns::pause(), on, env, budget).await,
            ScenarioId::SweeperKill => harness::run(Returns::sweeper_kill(), on, env, budget).await,
            ScenarioId::ReturnsDelay => harness::run(Returns::delay(), on, env, budget).await,
            ScenarioId::ReturnsControl => harness::run(Returns::control(), on, env, budget).await,
            ScenarioId::Fuzz => fuzz::run(env, budget).await,
            ScenarioId::LockTokens => lock_tokens::run(env).await,
        };
        report.finish(started.elapsed().as_millis() as u64);
        report
    }
}
