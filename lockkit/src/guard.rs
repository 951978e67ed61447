//! [`LockGuard`]: proof of a granted lease, with its fence, its loss signal, and release.

use std::{future::Future, sync::Arc, time::Duration};

use crate::{
    clock::Moment,
    core::Core,
    lease::Lease,
    model::{
        error::{Error, Result},
        fence::Fence,
        grant::{Renewal, Renewed},
        lease_loss::LeaseLoss,
    },
};

/// A held lock. Carry its [`fence`](LockGuard::fence) into every write the lock protects, watch
/// [`lost`](LockGuard::lost) while you work, and end with [`release`](LockGuard::release).
///
/// Dropping a guard without releasing never blocks: the release is handed to the client's
/// background task (and if no runtime is left to run it, the lease simply expires). The same
/// happens when a `release()` future is dropped before it completed.
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
    pub(crate) core: Arc<Core>,
    pub(crate) lease: Arc<Lease>,
    attempts: u32,
    waited: Duration,
    /// Set once `release()` completed, so `Drop` does not hand over a second release. A release
    /// cancelled before that leaves it unset: `Drop` then finishes the release in the background.
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

    /// The lease was handed over (a downgrade) or found gone: the drop has nothing to release.
    pub(crate) fn mark_released(&mut self) {
        self.released = true;
    }

    pub(crate) fn set_acquisition(&mut self, attempts: u32, waited: Duration) {
        self.attempts = attempts;
        self.waited = waited;
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lease.hold.keys.name
    }

    /// The fencing token of this grant: larger than that of every earlier grant of the same lock.
    pub fn fence(&self) -> Fence {
        self.lease.fence
    }

    /// Whether the lease has been lost. Once true, stay true.
    ///
    /// Compares the local deadline with the clock itself, so a holder that was paused past its
    /// lease sees the loss on its very next check, before the watchdog got to run.
    pub fn is_lost(&self) -> bool {
        self.lease.check().is_some()
    }

    /// Why the lease was lost, if it was (checking the local deadline like
    /// [`is_lost`](Self::is_lost)).
    pub fn loss(&self) -> Option<LeaseLoss> {
        self.lease.check()
    }

    /// Completes when the lease is lost, with the cause: the watchdog found the key gone or owned
    /// by someone else, or the local deadline passed (lease minus a drift margin, on a monotonic
    /// clock that also counts a suspend of the machine) without a confirmed renewal, or a fixed
    /// lease ran out. Watches the deadline itself, so it fires even if the watchdog cannot run.
    /// Independent of the guard's lifetime, so it fits in `tokio::select!` next to the work.
    pub fn lost(&self) -> impl Future<Output = LeaseLoss> + Send + 'static {
        self.lease.clone().lost()
    }

    /// `Err` (with [`Error::is_lost`]) if the lease was lost: a cheap check before a write
    /// (it reads the local deadline like [`is_lost`](Self::is_lost)).
    pub fn ensure_held(&self) -> Result<()> {
        match self.lease.check() {
            Some(_) => Err(Error::lease_lost(self.name())),
            None => Ok(()),
        }
    }

    /// How long the lease is known to last from now, by the local deadline: the last confirmed
    /// grant or renewal, measured from when it was *sent*, less a drift margin. Zero once lost.
    ///
    /// A write that must land while the lease holds has at most this long. Recorded next to a
    /// write as a wall-clock time (`SystemTime::now() + remaining()`), it lets an audit find the
    /// writes that landed after their own lease had run out: the ones a fence must refuse.
    pub fn remaining(&self) -> Duration {
        match self.lease.check() {
            Some(_) => Duration::ZERO,
            None => self.lease.deadline().until(),
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

    /// Sets the lease to `lease` from now, if we still own the lock (owner-checked `PEXPIRE`; on
    /// Redlock, confirmed by a majority).
    /// On a watched lock the watchdog keeps renewing with the new length.
    pub async fn extend(&mut self, lease: Duration) -> Result<()> {
        let lease = lease.max(Duration::from_millis(10));
        let core = &self.core;
        let mut state = self.lease.state.lock().await;
        if state.released || self.lease.check().is_some() {
            return Err(Error::lease_lost(self.name()));
        }
        let sent_at = Moment::now();
        let renewal = [Renewal { hold: &self.lease.hold, token: &self.lease.token, lease }];
        let timeout = core.config.command_timeout;
        // (If this future is dropped here, the watchdog finds the lease again within a few
        // milliseconds: it keeps looking while a lease is busy.)
        let extended = match tokio::time::timeout(timeout, core.backend.renew(&renewal)).await {
            Ok(Ok(outcomes)) if outcomes[0] == Renewed::Unanswered => {
                Err(Error::unanswered(core.backend.kind(), "an extension", timeout))
            }
            Ok(Ok(outcomes)) => Ok(outcomes[0]),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::unanswered(core.backend.kind(), "an extension", timeout)),
        };
        match extended {
            Err(e) => {
                // The old timetable stands; make sure the watchdog keeps to it.
                core.registry.rescheduled(state.schedule.next_event());
                Err(e)
            }
            Ok(Renewed::Extended) if self.lease.loss().is_none() => {
                state.schedule.extended(lease, sent_at);
                self.lease.publish(&state);
                core.registry.rescheduled(state.schedule.next_event());
                Ok(())
            }
            Ok(_) => {
                self.lease.mark_lost(LeaseLoss::Gone);
                core.registry.remove(self.lease.id);
                Err(Error::lease_lost(self.name()))
            }
        }
    }

    /// Releases the lock if we still own it (owner-checked compare-and-delete) and wakes a waiter.
    /// Returns whether we still held it: `false` means the lease had ended and someone else may
    /// have held the lock meanwhile.
    ///
    /// Cancel-safe: if this future is dropped before it completes, the guard's drop hands the
    /// release to the background task, which finishes it (the owner-checked delete is harmless to
    /// repeat).
    pub async fn release(mut self) -> Result<bool> {
        let held = self.core.release(&self.lease).await?;
        self.released = true;
        Ok(held)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.released {
            // The job owns the core, so the release runs even if this guard held the last
            // reference to the client.
            let (core, lease) = (self.core.clone(), self.lease.clone());
            self.core.jobs.background(async move {
                if let Err(e) = core.release(&lease).await {
                    tracing::warn!(lock = %lease.hold.keys.name, error = %e, "background release failed; the lease will expire");
                }
            });
        }
    }
}
