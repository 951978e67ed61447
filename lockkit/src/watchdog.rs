//! The watchdog: one background task per [`LockClient`](crate::LockClient) that renews every
//! watched lease in batched round trips, declares leases lost, and performs the releases that
//! dropped guards and abandoned acquires hand over.
//!
//! Not here: the renewal timetable itself ([`Schedule`](crate::lease::Schedule)), which is pure
//! logic and tested without a server.

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use redis::aio::MultiplexedConnection;
use tokio::sync::{OwnedMutexGuard, mpsc};

use crate::{
    LeaseLoss,
    clock::Moment,
    core::{Core, Job},
    lease::{Lease, LeaseState},
    metrics,
    scripts::{SCRIPTS, extend_cmd, is_noscript, millis},
};

/// How long the watchdog sleeps when it watches nothing.
const IDLE: Duration = Duration::from_secs(60);

/// How soon the watchdog looks again at a lease it found busy (an extension or a release
/// holding it): an extension may fail or be cancelled, and the lease must not go unscheduled.
const BUSY_RETRY: Duration = Duration::from_millis(5);

/// Starts the watchdog of a client. It stops when the client and every guard are gone (the job
/// channel closes).
pub(crate) fn spawn(core: Weak<Core>, jobs: mpsc::UnboundedReceiver<Job>) {
    tokio::spawn(run(core, jobs));
}

async fn run(core: Weak<Core>, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let Some(registry) = core.upgrade().map(|c| c.registry.clone()) else { return };
    loop {
        // Only a weak reference to the client while asleep, so it can be dropped.
        let next = match core.upgrade() {
            Some(strong) => tick(&strong).await,
            None => return,
        };
        registry.plan(next);
        tokio::select! {
            () = tokio::time::sleep(next.until()) => {}
            () = registry.changed.notified() => {}
            job = jobs.recv() => match job {
                None => return,
                Some(job) => run_job(job),
            },
        }
    }
}

fn run_job(job: Job) {
    match job {
        Job::Release(core, lease) => {
            tokio::spawn(async move {
                if let Err(e) = core.release(&lease).await {
                    tracing::warn!(lock = %lease.keys.name, error = %e, "background release failed; the lease will expire");
                }
            });
        }
        Job::Abandoned { mut conn, keys, token } => {
            tokio::spawn(async move {
                let mut undo = SCRIPTS.release.prepare_invoke();
                undo.key(&keys.lock).arg(&token).arg(&keys.released);
                if let Err(e) = undo.invoke_async::<i64>(&mut conn).await {
                    tracing::warn!(lock = %keys.name, error = %e, "could not undo an abandoned acquire; it will expire");
                }
            });
        }
    }
}

/// One pass: declares overdue leases lost, renews the due ones in one pipeline, and returns when
/// to look again.
async fn tick(core: &Core) -> Moment {
    let now = Moment::now();
    let mut next = now + IDLE;
    let mut due = Vec::new();
    for lease in core.registry.start_scan() {
        // Found lost by a check of its holder (the local deadline passed): nothing to renew.
        if lease.loss().is_some() {
            core.registry.remove(lease.id);
            continue;
        }
        // Busy means a release or an extension is running: a release removes the lease, an
        // extension may succeed, fail or be cancelled; look again soon in any case.
        let Ok(state) = lease.state.clone().try_lock_owned() else {
            next = next.min(now + BUSY_RETRY);
            continue;
        };
        if state.released {
            continue;
        }
        if state.schedule.is_expired(now) {
            lease.mark_lost(LeaseLoss::Expired);
            core.registry.remove(lease.id);
        } else if state.schedule.renewal_due(now) {
            due.push((lease, state));
        } else {
            next = next.min(state.schedule.next_event());
        }
    }
    if due.is_empty() {
        next
    } else {
        renew(core, due).await;
        Moment::now()
    }
}

/// Renews a batch of leases in one round trip. The leases' state locks are held throughout, so a
/// release that starts meanwhile waits for this to finish (and then nothing renews it again).
async fn renew(core: &Core, mut batch: Vec<(Arc<Lease>, OwnedMutexGuard<LeaseState>)>) {
    let sent_at = Moment::now();
    // Never wait for an answer past the earliest deadline in the batch: by then that lease is lost
    // whatever Redis says.
    let budget = batch
        .iter()
        .map(|(_, state)| state.schedule.remaining(sent_at))
        .min()
        .unwrap_or_default()
        .min(core.config.command_timeout);
    let mut pipe = redis::pipe();
    for (lease, state) in &batch {
        pipe.add_command(extend_cmd(&lease.keys.lock, &lease.token, millis(state.schedule.lease())));
    }
    metrics::renewal_round_trip();
    let outcome = core.conns.run_within("a lease renewal", budget, async |conn| run_pipeline(conn, &pipe).await).await;
    let now = Moment::now();
    match outcome {
        Ok(replies) => {
            let mut renewed = 0;
            for ((lease, state), reply) in batch.iter_mut().zip(replies) {
                renewed += usize::from(reply == 1);
                if lease.loss().is_some() {
                    // Presumed lost by a check while the renewal was in flight: it stays lost.
                    core.registry.remove(lease.id);
                } else if reply == 1 {
                    state.schedule.renewed(sent_at);
                    lease.publish(state);
                } else {
                    lease.mark_lost(LeaseLoss::Gone);
                    core.registry.remove(lease.id);
                }
            }
            metrics::renewals("renewed", renewed);
            metrics::renewals("gone", batch.len() - renewed);
        }
        Err(e) => {
            tracing::debug!(error = %e, leases = batch.len(), "lease renewal failed; retrying until the deadline");
            metrics::renewals("error", batch.len());
            for (lease, state) in &mut batch {
                state.schedule.renewal_failed(now);
                if state.schedule.is_expired(now) {
                    lease.mark_lost(LeaseLoss::Expired);
                    core.registry.remove(lease.id);
                }
            }
        }
    }
}

async fn run_pipeline(conn: &mut MultiplexedConnection, pipe: &redis::Pipeline) -> redis::RedisResult<Vec<i64>> {
    match pipe.query_async(conn).await {
        Err(e) if is_noscript(&e) => {
            SCRIPTS.extend.prepare_invoke().load_async(conn).await?;
            pipe.query_async(conn).await
        }
        result => result,
    }
}
