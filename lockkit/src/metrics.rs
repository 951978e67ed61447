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

use std::time::Duration;

use metrics::{counter, gauge, histogram};

use crate::model::fence::Fence;

pub(crate) fn attempt(outcome: &'static str) {
    counter!("lockkit_acquire_attempts_total", "outcome" => outcome).increment(1);
}

pub(crate) fn waited(outcome: &'static str, waited: Duration) {
    histogram!("lockkit_acquire_wait_seconds", "outcome" => outcome).record(waited.as_secs_f64());
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

pub(crate) fn renewals(outcome: &'static str, n: usize) {
    counter!("lockkit_renewals_total", "outcome" => outcome).increment(n as u64);
}

pub(crate) fn late_grant() {
    counter!("lockkit_late_grants_total").increment(1);
}

pub(crate) fn lost(cause: &'static str) {
    counter!("lockkit_leases_lost_total", "cause" => cause).increment(1);
}

#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn listen_unheard() {
    counter!("lockkit_postgres_listen_unheard_total").increment(1);
}
