//! The watchdog: one background task per [`LockClient`](crate::LockClient) that renews every
//! watched lease in batched round trips, declares leases lost, and performs the releases that
//! dropped guards and abandoned acquires hand over.
//!
//! Not here: the renewal timetable itself ([`Schedule`](crate::lease::Schedule)), which is pure
//! logic and tested without a server.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak, atomic::AtomicU64, atomic::Ordering},
    time::{Duration, Instant},
};

use redis::aio::MultiplexedConnection;
use tokio::sync::{Notify, OwnedMutexGuard, mpsc};

use crate::{
    LeaseLoss,
    client::Core,
    error::{Error, Result},
    keys::LockKeys,
    lease::{Lease, LeaseState},
    metrics,
    scripts::{SCRIPTS, extend_cmd, is_noscript},
};

/// How long the watchdog sleeps when it watches nothing.
const IDLE: Duration = Duration::from_secs(60);

/// The leases a client holds.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    leases: Mutex<HashMap<u64, Arc<Lease>>>,
    /// Wakes the watchdog when its timetable changed (a lease added, extended or released).
    pub(crate) changed: Notify,
    next_id: AtomicU64,
}

impl Registry {
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn insert(&self, lease: Arc<Lease>) {
        self.leases.lock().unwrap().insert(lease.id, lease);
        self.changed.notify_one();
    }

    pub(crate) fn remove(&self, id: u64) {
        if self.leases.lock().unwrap().remove(&id).is_some() {
            self.changed.notify_one();
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.leases.lock().unwrap().len()
    }

    fn snapshot(&self) -> Vec<Arc<Lease>> {
        self.leases.lock().unwrap().values().cloned().collect()
    }
}

/// Work handed to the watchdog task by code that cannot await (a `Drop`).
pub(crate) enum Job {
    /// A guard was dropped without `release()`. Carries the core so the release can run even if
    /// that guard held the last reference to the client.
    Release(Arc<Core>, Arc<Lease>),
    /// An acquire was cancelled while its script was in flight: undo a possible grant with an
    /// owner-checked delete on the *same* connection, so it reaches Redis after the acquire.
    Abandoned { conn: MultiplexedConnection, keys: LockKeys, token: String },
}

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
        tokio::select! {
            () = tokio::time::sleep_until(next.into()) => {}
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
async fn tick(core: &Core) -> Instant {
    let now = Instant::now();
    let mut next = now + IDLE;
    let mut due = Vec::new();
    for lease in core.registry.snapshot() {
        // Busy means a release or an extension is running; it notifies `changed` when done.
        let Ok(state) = lease.state.clone().try_lock_owned() else { continue };
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
        Instant::now()
    }
}

/// Renews a batch of leases in one round trip. The leases' state locks are held throughout, so a
/// release that starts meanwhile waits for this to finish (and then nothing renews it again).
async fn renew(core: &Core, mut batch: Vec<(Arc<Lease>, OwnedMutexGuard<LeaseState>)>) {
    let sent_at = Instant::now();
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
    let outcome = match tokio::time::timeout(budget, run_pipeline(core, &pipe)).await {
        Ok(result) => result,
        Err(_) => Err(Error::unanswered("a lease renewal", budget)),
    };
    let now = Instant::now();
    match outcome {
        Ok(replies) => {
            let mut renewed = 0;
            for ((lease, state), reply) in batch.iter_mut().zip(replies) {
                if reply == 1 {
                    state.schedule.renewed(sent_at);
                    renewed += 1;
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

async fn run_pipeline(core: &Core, pipe: &redis::Pipeline) -> Result<Vec<i64>> {
    let mut conn = core.pool.get().await?;
    match pipe.query_async(&mut conn).await {
        Err(e) if is_noscript(&e) => {
            SCRIPTS.extend.prepare_invoke().load_async(&mut conn).await?;
            Ok(pipe.query_async(&mut conn).await?)
        }
        result => Ok(result?),
    }
}

/// A duration in whole milliseconds, at least 1 (Redis refuses `PX 0`).
pub(crate) fn millis(d: Duration) -> u64 {
    (d.as_millis() as u64).max(1)
}
