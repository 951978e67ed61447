//! [`Core`]: what a client, its guards and its watchdog share, and the release that all of them
//! (a guard's `release()`, a dropped guard's background job) go through.

use std::sync::{Arc, atomic::Ordering};

use redis::aio::MultiplexedConnection;
use tokio::sync::mpsc;

use crate::{
    connections::Connections, error::Result, keys::LockKeys, lease::Lease, metrics, registry::Registry,
    scripts::SCRIPTS, wake::WakeHub,
};

/// Settings shared by every lock of a client.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) prefix: String,
    pub(crate) default_lease: std::time::Duration,
    pub(crate) command_timeout: std::time::Duration,
    pub(crate) wake_safety_interval: std::time::Duration,
}

/// What clients, guards and the watchdog share.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) conns: Connections,
    pub(crate) config: Config,
    pub(crate) registry: Arc<Registry>,
    /// To the watchdog task: releases from `Drop`, undo of cancelled acquires.
    pub(crate) jobs: mpsc::UnboundedSender<Job>,
    pub(crate) wake: WakeHub,
}

/// Work handed to the watchdog task by code that cannot await (a `Drop`).
pub(crate) enum Job {
    /// A guard was dropped without a completed `release()`. Carries the core so the release can
    /// run even if that guard held the last reference to the client.
    Release(Arc<Core>, Arc<Lease>),
    /// An acquire was cancelled while its script was in flight, or its grant came too late to be
    /// used: undo a possible grant with an owner-checked delete on the *same* connection, so it
    /// reaches Redis after the acquire.
    Abandoned { conn: MultiplexedConnection, keys: Arc<LockKeys>, token: String },
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
        {
            let mut state = lease.state.lock().await;
            if !state.released {
                state.released = true;
                lease.publish(&state);
                self.registry.remove(lease.id);
                metrics::held(lease.acquired_at.elapsed());
            }
        }
        let keys = &lease.keys;
        let mut invocation = SCRIPTS.release.prepare_invoke();
        invocation.key(&keys.lock).arg(&lease.token).arg(&keys.released);
        let deleted: i64 = self.conns.run(async |conn| invocation.invoke_async(conn).await).await?;
        lease.release_confirmed.store(true, Ordering::Release);
        Ok(deleted == 1)
    }
}
