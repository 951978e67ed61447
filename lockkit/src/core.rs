//! [`Core`]: what a client, its guards and its watchdog share, and the release that all of them
//! (a guard's `release()`, a dropped guard's background job) go through.

use std::sync::{Arc, atomic::Ordering};

use crate::{
    backend::{self, Backend, redis::RedisScripts},
    jobs::Jobs,
    lease::Lease,
    metrics,
    model::{backend_kind::Capability, error::Result, settings::Config},
    registry::Registry,
};

/// What clients, guards and the watchdog share.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) config: Config,
    pub(crate) registry: Arc<Registry>,
    pub(crate) jobs: Jobs,
}

impl Core {
    /// Refuses, before any request, what the backend cannot keep.
    pub(crate) fn ensure_supports(&self, capability: Capability) -> Result<()> {
        let kind = self.backend.kind();
        if kind.supports(capability) { Ok(()) } else { Err(backend::unsupported(kind, capability.what())) }
    }

    /// The backend's Redis scripts, for a capability that only the Redis backends keep.
    pub(crate) fn scripts_for(&self, capability: Capability) -> Result<&dyn RedisScripts> {
        self.ensure_supports(capability)?;
        self.backend.redis_scripts().ok_or_else(|| backend::unsupported(self.backend.kind(), capability.what()))
    }
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
