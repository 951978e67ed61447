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
    inner: Mutex<RegistryInner>,
    /// Wakes the watchdog when a lease needs attention before its planned wake-up.
    changed: Notify,
    next_id: AtomicU64,
}

#[derive(Debug, Default)]
struct RegistryInner {
    leases: HashMap<u64, Arc<Lease>>,
    /// When the sleeping watchdog will look next; `None` while it is scanning (then every change
    /// wakes it again). Lets a busy client add and remove leases without waking the watchdog each
    /// time: only a lease due before the planned wake-up does.
    planned: Option<Instant>,
}

impl Registry {
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Watches `lease`, whose first event (renewal or deadline) is at `next_event`.
    pub(crate) fn insert(&self, lease: Arc<Lease>, next_event: Instant) {
        let mut inner = self.inner.lock().unwrap();
        inner.leases.insert(lease.id, lease);
        self.wake_if_before_plan(&inner, next_event);
    }

    /// A watched lease's timetable moved (an extension); its next event is now `next_event`.
    pub(crate) fn rescheduled(&self, next_event: Instant) {
        self.wake_if_before_plan(&self.inner.lock().unwrap(), next_event);
    }

    fn wake_if_before_plan(&self, inner: &RegistryInner, next_event: Instant) {
        if inner.planned.is_none_or(|planned| next_event < planned) {
            self.changed.notify_one();
        }
    }

    /// Stops watching a lease. Never wakes the watchdog: it will find one lease fewer.
    pub(crate) fn remove(&self, id: u64) {
        self.inner.lock().unwrap().leases.remove(&id);
    }

    pub(crate) fn len(&self) -> usize {
        self.inner.lock().unwrap().leases.len()
    }

    /// The watched leases, for a scan; changes from now on wake the watchdog after the scan.
    fn start_scan(&self) -> Vec<Arc<Lease>> {
        let mut inner = self.inner.lock().unwrap();
        inner.planned = None;
        inner.leases.values().cloned().collect()
    }

    fn plan(&self, wake_at: Instant) {
        self.inner.lock().unwrap().planned = Some(wake_at);
    }
}

/// Work handed to the watchdog task by code that cannot await (a `Drop`).
pub(crate) enum Job {
    /// A guard was dropped without `release()`. Carries the core so the release can run even if
    /// that guard held the last reference to the client.
    Release(Arc<Core>, Arc<Lease>),
    /// An acquire was cancelled while its script was in flight: undo a possible grant with an
    /// owner-checked delete on the *same* connection, so it reaches Redis after the acquire.
    Abandoned { conn: MultiplexedConnection, keys: Arc<LockKeys>, token: String },
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
        registry.plan(next);
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
    for lease in core.registry.start_scan() {
        // Busy means a release or an extension is running: a release removes the lease, an
        // extension reschedules it.
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
    let outcome = core.conns.run_within("a lease renewal", budget, async |conn| run_pipeline(conn, &pipe).await).await;
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

async fn run_pipeline(conn: &mut MultiplexedConnection, pipe: &redis::Pipeline) -> redis::RedisResult<Vec<i64>> {
    match pipe.query_async(conn).await {
        Err(e) if is_noscript(&e) => {
            SCRIPTS.extend.prepare_invoke().load_async(conn).await?;
            pipe.query_async(conn).await
        }
        result => result,
    }
}

/// A duration in whole milliseconds, at least 1 (Redis refuses `PX 0`).
pub(crate) fn millis(d: Duration) -> u64 {
    (d.as_millis() as u64).max(1)
}
