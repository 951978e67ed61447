//! One granted lease: the state that the holder's guard, the watchdog and a background release
//! share, and its timetable ([`Schedule`]): when to renew, and when it must be presumed lost.

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio_util::sync::CancellationToken;

use crate::{
    clock::Moment,
    metrics,
    model::{fence::Fence, hold::Hold, lease_loss::LeaseLoss},
};

/// A lease is presumed lost this much before Redis would expire it: Redlock's clock drift
/// allowance (1% of the lease) plus 2 ms for timer granularity.
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// When a lease must be renewed and when it must be presumed lost. Pure logic on [`Moment`]s of
/// the lease clock: measured from the moment a command was *sent*, so the local deadline is never
/// later than Redis' expiry.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    lease: Duration,
    renews: bool,
    next_renewal: Moment,
    /// How early a renewal may join a batch: a sixth of the lease after a success, none while
    /// retrying after a failure (so a failing renewal does not spin).
    slack: Duration,
    deadline: Moment,
}

impl Schedule {
    /// A lease granted by a command sent at `sent_at`; `renews` when the watchdog keeps it alive.
    pub(crate) fn granted(sent_at: Moment, lease: Duration, renews: bool) -> Self {
        let mut schedule = Self { lease, renews, next_renewal: sent_at, slack: Duration::ZERO, deadline: sent_at };
        schedule.renewed(sent_at);
        schedule
    }

    /// Redis confirmed a renewal (or an extension) sent at `sent_at`.
    pub(crate) fn renewed(&mut self, sent_at: Moment) {
        self.deadline = sent_at + self.lease.saturating_sub(drift(self.lease));
        self.next_renewal = if self.renews { sent_at + self.lease / 3 } else { self.deadline };
        self.slack = self.lease / 6;
    }

    /// The lease length changed (an explicit extension confirmed for a command sent at `sent_at`).
    pub(crate) fn extended(&mut self, lease: Duration, sent_at: Moment) {
        self.lease = lease;
        self.renewed(sent_at);
    }

    /// A renewal failed at `now` (Redis unreachable): retry soon, but never past the deadline.
    pub(crate) fn renewal_failed(&mut self, now: Moment) {
        let retry = (self.lease / 10).clamp(Duration::from_millis(20), Duration::from_secs(1));
        self.next_renewal = (now + retry).min(self.deadline);
        self.slack = Duration::ZERO;
    }

    /// The lease can no longer be presumed held.
    pub(crate) fn is_expired(&self, now: Moment) -> bool {
        now >= self.deadline
    }

    /// Whether a watchdog batch running at `now` should renew this lease. A lease joins a batch up
    /// to a sixth of its length early, so leases due at nearby times share one round trip.
    pub(crate) fn renewal_due(&self, now: Moment) -> bool {
        self.renews && now + self.slack >= self.next_renewal
    }

    /// The next moment at which the watchdog must look at this lease.
    pub(crate) fn next_event(&self) -> Moment {
        self.next_renewal.min(self.deadline)
    }

    /// Time left before the lease must be presumed lost.
    pub(crate) fn remaining(&self, now: Moment) -> Duration {
        self.deadline.saturating_duration_since(now)
    }

    /// When the lease must be presumed lost.
    pub(crate) fn deadline(&self) -> Moment {
        self.deadline
    }

    pub(crate) fn lease(&self) -> Duration {
        self.lease
    }

    /// Whether the watchdog renews it.
    pub(crate) fn renews(&self) -> bool {
        self.renews
    }
}

/// Mutable part of a lease, behind an async mutex (see [`Lease::state`]).
#[derive(Debug)]
pub(crate) struct LeaseState {
    /// Set when release starts: renewals have stopped; nothing renews or extends a released lease.
    /// Whether the key was deleted is [`Lease::release_confirmed`].
    pub(crate) released: bool,
    pub(crate) schedule: Schedule,
}

/// A granted lease, shared by its guard, the watchdog and a background release.
#[derive(Debug)]
pub(crate) struct Lease {
    /// Key in the watchdog's registry.
    pub(crate) id: u64,
    /// What the lease holds, and so which scripts extend and release it.
    pub(crate) hold: Arc<Hold>,
    /// The random owner token stored in the lock key. Never leaves the process.
    pub(crate) token: String,
    pub(crate) fence: Fence,
    pub(crate) acquired_at: Instant,
    /// Serialises renewal, extension and release: the watchdog holds it for the whole round trip
    /// of a renewal and release holds it while marking the lease released, so no renewal can run
    /// after release has started, and release waits out one in flight.
    pub(crate) state: Arc<tokio::sync::Mutex<LeaseState>>,
    /// The schedule's deadline as [`Moment`] nanoseconds, readable without the state lock: every
    /// loss check compares it with the clock. [`Moment::NEVER`] once release has started (a
    /// released lease is not lost).
    deadline: AtomicU64,
    /// Set once a release's compare-and-delete was answered: a background release queued after
    /// a cancelled one then has nothing left to do.
    pub(crate) release_confirmed: AtomicBool,
    /// Cancelled when the lease is lost; what `LockGuard::lost()` waits on.
    lost: CancellationToken,
    loss: OnceLock<LeaseLoss>,
}

impl Lease {
    pub(crate) fn new(id: u64, hold: Arc<Hold>, token: String, fence: Fence, schedule: Schedule) -> Self {
        Self {
            id,
            hold,
            token,
            fence,
            acquired_at: Instant::now(),
            deadline: AtomicU64::new(schedule.deadline().as_nanos()),
            release_confirmed: AtomicBool::new(false),
            state: Arc::new(tokio::sync::Mutex::new(LeaseState { released: false, schedule })),
            lost: CancellationToken::new(),
            loss: OnceLock::new(),
        }
    }

    /// Records the loss (the first cause wins) and wakes everyone waiting on `lost()`.
    pub(crate) fn mark_lost(&self, cause: LeaseLoss) {
        if self.loss.set(cause).is_ok() {
            metrics::lost(cause);
            tracing::warn!(lock = %self.hold.keys.name, fence = %self.fence, ?cause, "lease lost");
            self.lost.cancel();
        }
    }

    /// The recorded loss, without looking at the clock.
    pub(crate) fn loss(&self) -> Option<LeaseLoss> {
        self.loss.get().copied()
    }

    /// The loss, after comparing the local deadline with the clock: past it, the lease is marked
    /// lost ([`LeaseLoss::Expired`]) here and now, whether or not the watchdog has run since.
    pub(crate) fn check(&self) -> Option<LeaseLoss> {
        if self.loss().is_none() && Moment::now() >= self.deadline() {
            self.mark_lost(LeaseLoss::Expired);
        }
        self.loss()
    }

    /// The local deadline ([`Moment::NEVER`] once release started).
    pub(crate) fn deadline(&self) -> Moment {
        Moment::from_nanos(self.deadline.load(Ordering::Acquire))
    }

    /// Publishes the schedule's deadline to loss checks; call with the state lock held after
    /// every change of the schedule.
    pub(crate) fn publish(&self, state: &LeaseState) {
        let deadline = if state.released { Moment::NEVER } else { state.schedule.deadline() };
        self.deadline.store(deadline.as_nanos(), Ordering::Release);
    }

    /// Completes when the lease is lost: on the watchdog's word, or on the local deadline even if
    /// the watchdog never runs. Never completes for a lease released before it was lost.
    pub(crate) async fn lost(self: Arc<Self>) -> LeaseLoss {
        // A sleep on the runtime's clock does not count a suspend of the machine; waking at least
        // this often bounds how late a loss across a suspend is noticed.
        const RECHECK: Duration = Duration::from_secs(1);
        let signal = self.lost.clone();
        loop {
            if let Some(cause) = self.check() {
                return cause;
            }
            let deadline = self.deadline();
            if deadline == Moment::NEVER {
                signal.cancelled().await;
                continue;
            }
            tokio::select! {
                () = signal.cancelled() => {}
                () = tokio::time::sleep(deadline.until().min(RECHECK)) => {}
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn lost_signal(&self) -> CancellationToken {
        self.lost.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(30);

    #[test]
    fn deadline_precedes_redis_expiry_by_the_drift() {
        let t0 = Moment::now();
        let s = Schedule::granted(t0, LEASE, true);
        assert!(!s.is_expired(t0 + (LEASE - drift(LEASE) - Duration::from_millis(1))));
        assert!(s.is_expired(t0 + (LEASE - drift(LEASE))));
        assert!(s.is_expired(t0 + LEASE));
    }

    #[test]
    fn watchdog_renews_every_third_of_the_lease_with_batching_slack() {
        let t0 = Moment::now();
        let mut s = Schedule::granted(t0, LEASE, true);
        assert!(!s.renewal_due(t0 + Duration::from_secs(4)));
        assert!(s.renewal_due(t0 + Duration::from_secs(5)), "a sixth early joins a batch");
        assert_eq!(s.next_event(), t0 + Duration::from_secs(10));
        s.renewed(t0 + Duration::from_secs(6));
        assert!(!s.is_expired(t0 + Duration::from_secs(35)));
        assert_eq!(s.next_event(), t0 + Duration::from_secs(16));
    }

    #[test]
    fn failed_renewals_retry_soon_but_never_past_the_deadline() {
        let t0 = Moment::now();
        let mut s = Schedule::granted(t0, Duration::from_secs(1), true);
        let first_try = t0 + Duration::from_millis(333);
        s.renewal_failed(first_try);
        assert!(!s.renewal_due(first_try), "no immediate retry");
        assert_eq!(s.next_event(), first_try + Duration::from_millis(100));
        let late = t0 + Duration::from_millis(970);
        s.renewal_failed(late);
        assert_eq!(s.next_event(), t0 + Duration::from_millis(988), "capped by the deadline");
        assert!(s.is_expired(t0 + Duration::from_millis(988)));
    }

    #[test]
    fn an_explicit_lease_is_never_renewed_and_ends_at_its_deadline() {
        let t0 = Moment::now();
        let s = Schedule::granted(t0, Duration::from_secs(2), false);
        assert!(!s.renewal_due(t0 + Duration::from_millis(1999)));
        assert_eq!(s.next_event(), t0 + (Duration::from_secs(2) - drift(Duration::from_secs(2))));
    }

    #[tokio::test(start_paused = true)]
    async fn lost_signal_fires_once_with_the_first_cause() {
        let keys = crate::model::keys::LockKeys::new("lockkit", "x").unwrap();
        let hold = Arc::new(Hold::new(keys, crate::model::hold::HoldKind::Lock { delay: Duration::ZERO }));
        let t0 = Moment::now();
        let lease = Arc::new(Lease::new(1, hold, "t".into(), Fence::new(1), Schedule::granted(t0, LEASE, true)));
        let signal = lease.lost_signal();
        let waiter = tokio::spawn(async move { signal.cancelled().await });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!waiter.is_finished());
        lease.mark_lost(LeaseLoss::Gone);
        lease.mark_lost(LeaseLoss::Expired);
        waiter.await.unwrap();
        assert_eq!(lease.loss(), Some(LeaseLoss::Gone));
    }
}
