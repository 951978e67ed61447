//! Metric names and the few places that record them. lockkit only calls the `metrics` facade;
//! the application installs an exporter (Prometheus, StatsD, ...) if it wants the numbers.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `lockkit_acquire_attempts_total` | counter | `outcome` = `acquired` / `held` / `error` |
//! | `lockkit_acquire_wait_seconds` | histogram | `outcome` = `acquired` / `timeout` |
//! | `lockkit_hold_seconds` | histogram | |
//! | `lockkit_renewals_total` | counter | `outcome` = `renewed` / `gone` / `error` |
//! | `lockkit_renewal_round_trips_total` | counter | | one per batch, however many leases it renews |
//! | `lockkit_leases_lost_total` | counter | `cause` = `gone` / `expired` |
//! | `lockkit_late_grants_total` | counter | | grants answered after their lease was over, undone |
//! | `lockkit_fence` | gauge | | the last fence granted to this process |
//! | `lockkit_postgres_listen_unheard_total` | counter | | PostgreSQL `LISTEN` checks whose `NOTIFY` never came back (waiters poll) |
//!
//! Labels never carry lock names or tokens: they stay bounded however many locks you use.
//!
//! Every label value is written as a literal at its macro call, one call per value: the `metrics`
//! macros then keep the key in a static, where a label value passed as a variable would build
//! (and allocate) the key on every call, whether or not an exporter is installed.

use std::time::Duration;

use metrics::{counter, gauge, histogram};

use crate::model::{fence::Fence, lease_loss::LeaseLoss};

/// What one acquire attempt came to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AttemptOutcome {
    Acquired,
    Held,
    Error,
}

pub(crate) fn attempt(outcome: AttemptOutcome) {
    match outcome {
        AttemptOutcome::Acquired => counter!("lockkit_acquire_attempts_total", "outcome" => "acquired").increment(1),
        AttemptOutcome::Held => counter!("lockkit_acquire_attempts_total", "outcome" => "held").increment(1),
        AttemptOutcome::Error => counter!("lockkit_acquire_attempts_total", "outcome" => "error").increment(1),
    }
}

/// How a whole acquire ended: granted, or its wait ran out.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WaitOutcome {
    Acquired,
    Timeout,
}

pub(crate) fn waited(outcome: WaitOutcome, waited: Duration) {
    let seconds = waited.as_secs_f64();
    match outcome {
        WaitOutcome::Acquired => histogram!("lockkit_acquire_wait_seconds", "outcome" => "acquired").record(seconds),
        WaitOutcome::Timeout => histogram!("lockkit_acquire_wait_seconds", "outcome" => "timeout").record(seconds),
    }
}

pub(crate) fn granted(fence: Fence) {
    // A gauge is an f64; fences beyond 2^53 lose precision here, which is fine for a dashboard.
    gauge!("lockkit_fence").set(fence.get() as f64);
}

pub(crate) fn held(duration: Duration) {
    histogram!("lockkit_hold_seconds").record(duration.as_secs_f64());
}

pub(crate) fn renewal_round_trip() {
    counter!("lockkit_renewal_round_trips_total").increment(1);
}

/// Renewals of one batch by outcome: renewed, gone (the key no longer ours), failed.
pub(crate) fn renewals(renewed: usize, gone: usize, failed: usize) {
    counter!("lockkit_renewals_total", "outcome" => "renewed").increment(renewed as u64);
    counter!("lockkit_renewals_total", "outcome" => "gone").increment(gone as u64);
    counter!("lockkit_renewals_total", "outcome" => "error").increment(failed as u64);
}

pub(crate) fn late_grant() {
    counter!("lockkit_late_grants_total").increment(1);
}

pub(crate) fn lost(cause: LeaseLoss) {
    match cause {
        LeaseLoss::Gone => counter!("lockkit_leases_lost_total", "cause" => "gone").increment(1),
        LeaseLoss::Expired => counter!("lockkit_leases_lost_total", "cause" => "expired").increment(1),
    }
}

#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn listen_unheard() {
    counter!("lockkit_postgres_listen_unheard_total").increment(1);
}
