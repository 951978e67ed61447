//! [`Core`]: what a client, its guards and its watchdog share, and the release that all of them
//! (a guard's `release()`, a dropped guard's background job) go through.

use std::sync::{Arc, atomic::Ordering};

use tokio::sync::mpsc;

use crate::{
    backend::{Backend, BoxFuture},
    error::Result,
    lease::Lease,
    metrics,
    registry::Registry,
};

/// Settings shared by every lock of a client.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) prefix: String,
    pub(crate) default_lease: std::time::Duration,
    pub(crate) command_timeout: std::time::Duration,
    pub(crate) wake_safety_interval: std::time::Duration,
    /// Redlock: longest wait for one node's answer (small against the lease).
    pub(crate) node_timeout: std::time::Duration,
    /// Connect to Redis servers whose eviction policy may drop lock keys (the user opted out of
    /// the check).
    pub(crate) allow_eviction: bool,
    /// Protections a test switched off (none otherwise).
    pub(crate) controls: crate::controls::Controls,
}

/// What clients, guards and the watchdog share.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) config: Config,
    pub(crate) registry: Arc<Registry>,
    pub(crate) jobs: Jobs,
}

/// Work handed to the watchdog task by code that cannot await (a `Drop`).
pub(crate) enum Job {
    /// A guard was dropped without a completed `release()`. Carries the core so the release can
    /// run even if that guard held the last reference to the client.
    Release(Arc<Core>, Arc<Lease>),
    /// Work to finish in the background: the undo of an acquire that was cancelled while its
    /// request was in flight, or whose grant came too late to be used.
    Background(BoxFuture<'static, ()>),
}

/// The queue of [`Job`]s to the watchdog task, and a count of those not finished yet.
#[derive(Debug, Clone)]
pub(crate) struct Jobs {
    queue: mpsc::UnboundedSender<Job>,
    unfinished: Arc<Unfinished>,
}

/// Jobs queued or running, and a signal each time one finishes.
#[derive(Debug, Default)]
pub(crate) struct Unfinished {
    count: std::sync::atomic::AtomicUsize,
    finished: tokio::sync::Notify,
}

impl Unfinished {
    /// One job is done.
    pub(crate) fn done(&self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
        self.finished.notify_waiters();
    }
}

impl Jobs {
    /// A queue into `queue`.
    pub(crate) fn new(queue: mpsc::UnboundedSender<Job>) -> Self {
        Self { queue, unfinished: Arc::default() }
    }

    /// The count the watchdog decrements as jobs finish.
    pub(crate) fn unfinished(&self) -> Arc<Unfinished> {
        self.unfinished.clone()
    }

    /// Queues `job`. If the watchdog is gone (the runtime is shutting down), it is dropped: leases
    /// then simply expire.
    pub(crate) fn send(&self, job: Job) {
        self.unfinished.count.fetch_add(1, Ordering::AcqRel);
        if self.queue.send(job).is_err() {
            self.unfinished.done();
        }
    }

    /// Waits until every job queued so far has finished, or `within` has passed; true if they
    /// all finished.
    pub(crate) async fn flush(&self, within: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let finished = self.unfinished.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            if self.unfinished.count.load(Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, finished).await.is_err() {
                return false;
            }
        }
    }

    /// Queues `work` to run in the background.
    pub(crate) fn background(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.send(Job::Background(Box::pin(work)));
    }
}

impl Core {
    /// Stops the watchdog for this lease (waiting out a renewal in flight), then deletes the key if
    /// it still holds our token.
    ///
    /// Idempotent, so that a release cancelled at any await can be finished in the background:
    /// the first call to get the state lock stops the renewals; every call until one is answered
    /// runs the owner-checked compare-and-delete (harmless twice: it only deletes our own token);
    /// after an answer, further calls return `Ok(false)` at once.
    pub(crate) async fn release(&self, lease: &Lease) -> Result<bool> {
        if lease.release_confirmed.load(Ordering::Acquire) {
            return Ok(false);
        }
        self.stop_watching(lease).await;
        let held = self.backend.release(&lease.hold, &lease.token).await?;
        lease.release_confirmed.store(true, Ordering::Release);
        Ok(held)
    }

    /// Marks the lease released, waiting out a renewal in flight: no renewal or extension runs
    /// after this returns. The first half of a release; a downgrade then hands the key over
    /// instead of deleting it.
    pub(crate) async fn stop_watching(&self, lease: &Lease) {
        let mut state = lease.state.lock().await;
        if !state.released {
            state.released = true;
            lease.publish(&state);
            self.registry.remove(lease.id);
            metrics::held(lease.acquired_at.elapsed());
        }
    }
}
