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

use tokio::sync::{OwnedMutexGuard, mpsc};

use crate::{
    clock::Moment,
    core::Core,
    jobs::{Job, Unfinished},
    lease::{Lease, LeaseState},
    metrics,
    model::{
        error::Error,
        grant::{Renewal, Renewed},
        lease_loss::LeaseLoss,
    },
};

/// How soon the watchdog looks again at a lease it found busy (an extension or a release
/// holding it): an extension may fail or be cancelled, and the lease must not go unscheduled.
const BUSY_RETRY: Duration = Duration::from_millis(5);

/// Starts the watchdog of a client. It stops when the client and every guard are gone (the job
/// channel closes).
pub(crate) fn spawn(core: Weak<Core>, jobs: mpsc::UnboundedReceiver<Job>) {
    tokio::spawn(run(core, jobs));
}

async fn run(core: Weak<Core>, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let Some((registry, unfinished)) = core.upgrade().map(|c| (c.registry.clone(), c.jobs.unfinished())) else {
        return;
    };
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
                Some(job) => run_job(job, unfinished.clone()),
            },
        }
    }
}

/// Runs `job` in its own task, and counts it finished when it is.
fn run_job(job: Job, unfinished: Arc<Unfinished>) {
    tokio::spawn(async move {
        job.await;
        unfinished.done();
    });
}

/// One pass: declares overdue leases lost, renews the due ones in one pipeline, and returns when
/// to look again.
async fn tick(core: &Core) -> Moment {
    let now = Moment::now();
    // At the latest, the next look is a third of the default lease away, even with nothing to
    // watch: the first renewal of any lease granted later with the default lease falls after it,
    // so such a grant need not wake the watchdog. (Sleeping longer when idle made a client that
    // holds one short lock at a time wake it at every grant: two context switches per pair.)
    let mut next = now + core.config.default_lease / 3;
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

/// Renews a batch of leases (on one Redis: in one round trip). The leases' state locks are held
/// throughout, so a release that starts meanwhile waits for this to finish (and then nothing renews
/// it again).
///
/// The batch waits for its answer as long as any of its leases can still use it (at most the
/// command timeout), not only as long as the lease nearest its deadline: a lease that a pause or
/// a slow answer left nearly expired must not fail the renewals of the healthy ones beside it.
/// A lease whose deadline passes while the batch is in flight is declared lost at its deadline,
/// whatever the answer says later.
async fn renew(core: &Core, mut batch: Vec<(Arc<Lease>, OwnedMutexGuard<LeaseState>)>) {
    let sent_at = Moment::now();
    let budget = batch
        .iter()
        .map(|(_, state)| state.schedule.remaining(sent_at))
        .max()
        .unwrap_or_default()
        .min(core.config.command_timeout);
    let outcome = {
        let renewals: Vec<Renewal<'_>> = batch
            .iter()
            .map(|(lease, state)| Renewal { hold: &lease.hold, token: &lease.token, lease: state.schedule.lease() })
            .collect();
        metrics::renewal_round_trip();
        let answer = tokio::time::timeout(budget, core.backend.renew(&renewals));
        match answer_or_deadlines(answer, &batch).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Error::unanswered(core.backend.kind(), "a lease renewal", budget)),
        }
    };
    let now = Moment::now();
    match outcome {
        Ok(outcomes) => {
            let mut counts = [0; 3];
            for ((lease, state), outcome) in batch.iter_mut().zip(outcomes) {
                if lease.loss().is_some() {
                    // Presumed lost by a check while the renewal was in flight: it stays lost.
                    core.registry.remove(lease.id);
                    continue;
                }
                match outcome {
                    Renewed::Extended => {
                        counts[0] += 1;
                        state.schedule.renewed(sent_at);
                        lease.publish(state);
                    }
                    Renewed::Gone => {
                        counts[1] += 1;
                        lease.mark_lost(LeaseLoss::Gone);
                        core.registry.remove(lease.id);
                    }
                    Renewed::Unanswered => {
                        counts[2] += 1;
                        retry_or_lose(core, lease, state, now);
                    }
                }
            }
            metrics::renewals(counts[0], counts[1], counts[2]);
        }
        Err(e) => {
            tracing::debug!(error = %e, leases = batch.len(), "lease renewal failed; retrying until the deadline");
            let mut failed = 0;
            for (lease, state) in &mut batch {
                if lease.loss().is_some() {
                    core.registry.remove(lease.id);
                } else {
                    failed += 1;
                    retry_or_lose(core, lease, state, now);
                }
            }
            metrics::renewals(0, 0, failed);
        }
    }
}

/// Awaits `answer`, and meanwhile declares each lease of `batch` lost when its deadline passes.
async fn answer_or_deadlines<T>(
    answer: impl Future<Output = T>,
    batch: &[(Arc<Lease>, OwnedMutexGuard<LeaseState>)],
) -> T {
    let mut deadlines: Vec<(Moment, &Lease)> =
        batch.iter().map(|(lease, state)| (state.schedule.deadline(), lease.as_ref())).collect();
    deadlines.sort_by_key(|(deadline, _)| *deadline);
    let mut deadlines = deadlines.into_iter().peekable();
    tokio::pin!(answer);
    loop {
        let Some(&(next, _)) = deadlines.peek() else { return answer.await };
        tokio::select! {
            outcome = &mut answer => return outcome,
            () = tokio::time::sleep(next.until()) => {
                let now = Moment::now();
                while let Some((_, lease)) = deadlines.next_if(|(deadline, _)| *deadline <= now) {
                    lease.mark_lost(LeaseLoss::Expired);
                }
            }
        }
    }
}

/// A renewal got no usable answer at `now`: retry soon, unless the deadline already passed.
fn retry_or_lose(core: &Core, lease: &Lease, state: &mut LeaseState, now: Moment) {
    state.schedule.renewal_failed(now);
    if state.schedule.is_expired(now) {
        lease.mark_lost(LeaseLoss::Expired);
        core.registry.remove(lease.id);
    }
}
