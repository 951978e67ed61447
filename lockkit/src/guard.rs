//! [`LockGuard`]: proof of a granted lease, with its fence, its loss signal, and release.

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use crate::{
    Fence, LeaseLoss,
    client::Core,
    error::{Error, Result},
    lease::Lease,
    metrics,
    scripts::SCRIPTS,
    watchdog::{Job, millis},
};

/// A held lock. Carry its [`fence`](LockGuard::fence) into every write the lock protects, watch
/// [`lost`](LockGuard::lost) while you work, and end with [`release`](LockGuard::release).
///
/// Dropping a guard without releasing never blocks: the release is handed to the client's
/// background task (and if no runtime is left to run it, the lease simply expires).
///
/// ```no_run
/// # async fn demo(client: lockkit::LockClient) -> lockkit::Result<()> {
/// let guard = client.try_lock("report").await?.expect("free");
/// tokio::select! {
///     cause = guard.lost() => eprintln!("lease lost ({cause:?}); abandoning"),
///     () = do_the_work(guard.fence()) => {}
/// }
/// let still_held = guard.release().await?;
/// # Ok(()) }
/// # async fn do_the_work(_: lockkit::Fence) {}
/// ```
#[must_use = "the lock is released as soon as the guard is dropped; keep it while you work"]
pub struct LockGuard {
    core: Arc<Core>,
    lease: Arc<Lease>,
    attempts: u32,
    waited: Duration,
    /// Set by `release()`, so `Drop` does not hand over a second release.
    released: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("fence", &self.fence())
            .field("lost", &self.lease.loss())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(crate) fn new(core: Arc<Core>, lease: Arc<Lease>) -> Self {
        Self { core, lease, attempts: 1, waited: Duration::ZERO, released: false }
    }

    pub(crate) fn set_acquisition(&mut self, attempts: u32, waited: Duration) {
        self.attempts = attempts;
        self.waited = waited;
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lease.keys.name
    }

    /// The fencing token of this grant: larger than that of every earlier grant of the same lock.
    pub fn fence(&self) -> Fence {
        self.lease.fence
    }

    /// Whether the lease has been lost. Once true, stay true.
    pub fn is_lost(&self) -> bool {
        self.lease.loss().is_some()
    }

    /// Why the lease was lost, if it was.
    pub fn loss(&self) -> Option<LeaseLoss> {
        self.lease.loss()
    }

    /// Completes when the lease is lost, with the cause: the watchdog found the key gone or owned
    /// by someone else, or could not renew before the local deadline (lease minus a drift margin,
    /// on the monotonic clock), or a fixed lease ran out. Independent of the guard's lifetime, so
    /// it fits in `tokio::select!` next to the work.
    pub fn lost(&self) -> impl Future<Output = LeaseLoss> + Send + 'static {
        let lease = self.lease.clone();
        let signal = lease.lost_signal();
        async move {
            signal.cancelled().await;
            lease.loss().unwrap_or(LeaseLoss::Gone)
        }
    }

    /// `Err` (with [`Error::is_lost`]) if the lease was lost: a cheap check before a write.
    pub fn ensure_held(&self) -> Result<()> {
        match self.lease.loss() {
            Some(_) => Err(Error::lease_lost(self.name())),
            None => Ok(()),
        }
    }

    /// Acquire attempts (script round trips) it took to get this lock.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Time spent waiting for this lock.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Sets the lease to `lease` from now, if we still own the lock (owner-checked `PEXPIRE`).
    /// On a watched lock the watchdog keeps renewing with the new length.
    pub async fn extend(&mut self, lease: Duration) -> Result<()> {
        let lease = lease.max(Duration::from_millis(10));
        let core = &self.core;
        let mut state = self.lease.state.lock().await;
        if state.released || self.lease.loss().is_some() {
            return Err(Error::lease_lost(self.name()));
        }
        let sent_at = Instant::now();
        let keys = &self.lease.keys;
        let mut invocation = SCRIPTS.extend.prepare_invoke();
        invocation.key(&keys.lock).arg(&self.lease.token).arg(millis(lease));
        let extended: i64 = core.conns.run(async |conn| invocation.invoke_async(conn).await).await?;
        if extended == 1 {
            state.schedule.extended(lease, sent_at);
            core.registry.rescheduled(state.schedule.next_event());
            Ok(())
        } else {
            self.lease.mark_lost(LeaseLoss::Gone);
            core.registry.remove(self.lease.id);
            Err(Error::lease_lost(self.name()))
        }
    }

    /// Releases the lock if we still own it (owner-checked compare-and-delete) and wakes a waiter.
    /// Returns whether we still held it: `false` means the lease had ended and someone else may
    /// have held the lock meanwhile.
    pub async fn release(mut self) -> Result<bool> {
        self.released = true;
        self.core.release(&self.lease).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.core.jobs.send(Job::Release(self.core.clone(), self.lease.clone()));
        }
    }
}

impl Core {
    /// Stops the watchdog for this lease (waiting out a renewal in flight), then deletes the key if
    /// it still holds our token.
    pub(crate) async fn release(&self, lease: &Lease) -> Result<bool> {
        let mut state = lease.state.lock().await;
        if state.released {
            return Ok(false);
        }
        state.released = true;
        drop(state);
        self.registry.remove(lease.id);
        metrics::held(lease.acquired_at.elapsed());
        let keys = &lease.keys;
        let mut invocation = SCRIPTS.release.prepare_invoke();
        invocation.key(&keys.lock).arg(&lease.token).arg(&keys.released);
        let deleted: i64 = self.conns.run(async |conn| invocation.invoke_async(conn).await).await?;
        Ok(deleted == 1)
    }
}
