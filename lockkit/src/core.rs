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

/// The queue of [`Job`]s to the watchdog task.
#[derive(Debug, Clone)]
pub(crate) struct Jobs(pub(crate) mpsc::UnboundedSender<Job>);

impl Jobs {
    /// Queues `job`. If the watchdog is gone (the runtime is shutting down), it is dropped: leases
    /// then simply expire.
    pub(crate) fn send(&self, job: Job) {
        let _ = self.0.send(job);
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
