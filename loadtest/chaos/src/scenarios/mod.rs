//! The scenarios, one file each. Those that inject faults under load implement
//! [`under_load::FaultPlan`] and share one run ([`under_load::run`]): start two instances, create
//! a sale, drive the load, inject, heal, resolve, check (`redis-gate` sales also reconcile and
//! sell out, see `gate`). The others (`fuzz`, `lock_tokens`,
//! `redlock`) are self-contained.

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
mod stale_failover;
pub mod under_load;

use std::time::Instant;

use crate::{environment::Environment, report::ScenarioReport, settings::Budget};

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
    /// `redis-gate`: an instance aborts between the decrement and the stream write (failpoint);
    /// the undersell must be detected and repaired by reconciliation.
    GateFailpoint,
    /// `pg-delay` against `owned-unfenced`: must be caught overselling.
    PgDelayControl,
    /// Bad input at scale: schemathesis against the OpenAPI document.
    Fuzz,
    /// lockkit: a forged or stale token can neither release nor extend a lock.
    LockTokens,
}

impl ScenarioId {
    /// Every scenario, in run order.
    pub const ALL: [ScenarioId; 17] = [
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
        Self::Fuzz,
        Self::LockTokens,
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
        }
    }

    /// Looks a scenario up by name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Runs the scenario; never panics on a failure, which ends up in the report.
    pub async fn run(self, env: &mut Environment, budget: &Budget) -> ScenarioReport {
        let started = Instant::now();
        let mut report = match self {
            Self::Pause => under_load::run(pause::Pause::fenced(), env, budget).await,
            Self::RedisLoss => under_load::run(redis_loss::RedisLoss, env, budget).await,
            Self::Partition => under_load::run(partition::Partition::default(), env, budget).await,
            Self::PgRestart => under_load::run(pg_restart::PgRestart, env, budget).await,
            Self::PgDelay => under_load::run(pg_link::PgLink::delay(), env, budget).await,
            Self::PgBlackhole => under_load::run(pg_link::PgLink::blackhole(), env, budget).await,
            Self::PgDelayControl => {
                under_load::run(pg_link::PgLink::delay_control(), env, budget).await
            }
            Self::EarlyExpiry => {
                under_load::run(early_expiry::EarlyExpiry::default(), env, budget).await
            }
            Self::StaleFailover => {
                under_load::run(stale_failover::StaleFailover::default(), env, budget).await
            }
            Self::Redlock => redlock::run(env, budget).await,
            Self::Control => under_load::run(control::plan(), env, budget).await,
            Self::InstanceKill => under_load::run(instance_kill::InstanceKill, env, budget).await,
            Self::GateRedisLoss => under_load::run(gate::GatePlan::redis_loss(), env, budget).await,
            Self::GateRedisLossDurable => {
                under_load::run(gate::GatePlan::redis_loss_durable(), env, budget).await
            }
            Self::GateFailpoint => under_load::run(gate::GatePlan::failpoint(), env, budget).await,
            Self::Fuzz => fuzz::run(env, budget).await,
            Self::LockTokens => lock_tokens::run(env).await,
        };
        report.finish(started.elapsed().as_millis() as u64);
        report
    }
}
