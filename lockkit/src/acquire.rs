//! Acquiring a lock: one round trip per attempt, and a wait loop that sleeps until a
//! release is announced instead of polling.

use std::{
    future::{Future, IntoFuture},
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant},
};

use tracing::Instrument;

use crate::{
    clock::Moment,
    core::Core,
    guard::LockGuard,
    lease::{Lease, Schedule},
    metrics::{self, AttemptOutcome, WaitOutcome},
    model::{
        error::{Error, ErrorKind, Result},
        grant::Grant,
        hold::{Hold, HoldKind},
        keys::LockKeys,
        token::new_token,
    },
};

/// A pending acquisition, configured with builder methods and run by `.await`.
/// Made by [`LockClient::acquire`](crate::LockClient::acquire) (the plain lock) and by the
/// primitives' constructors ([`LockClient::reentrant`](crate::LockClient::reentrant),
/// [`LockClient::fair`](crate::LockClient::fair),
/// [`ReadWriteLock::read`](crate::ReadWriteLock::read) and
/// [`write`](crate::ReadWriteLock::write), [`LockClient::semaphore`](crate::LockClient::semaphore)).
/// Every one of them ends in the same [`LockGuard`].
///
/// Cancel-safe: if the future is dropped after Redis granted the lock, the lock is released in
/// the background instead of lingering until its lease ends.
#[derive(Debug)]
#[must_use = "an acquire does nothing until awaited"]
pub struct Acquire<'a> {
    core: &'a Arc<Core>,
    name: &'a str,
    kind: HoldKind,
    lease: Option<Duration>,
    wait: Duration,
    lock_delay: Option<Duration>,
    queue_timeout: Option<Duration>,
}

impl<'a> Acquire<'a> {
    pub(crate) fn new(core: &'a Arc<Core>, name: &'a str) -> Self {
        Self::of(core, name, HoldKind::Lock { delay: Duration::ZERO })
    }

    /// An acquisition of one of the primitives.
    pub(crate) fn of(core: &'a Arc<Core>, name: &'a str, kind: HoldKind) -> Self {
        Self { core, name, kind, lease: None, wait: Duration::ZERO, lock_delay: None, queue_timeout: None }
    }

    /// Lock-delay (as in Chubby and Consul), for the plain lock: if this grant's lease ends
    /// without a release (the holder crashed, hung or lost its connection), the lock stays
    /// unavailable to everyone for `delay` more, timed by Redis, so that the stale holder's
    /// in-flight writes drain before a new holder starts. A release ends it at once: no delay.
    ///
    /// Waiters see the delay as a held lock (a timeout if it outlasts their wait). The delay is
    /// the holder's choice: it applies to the grant that set it, whoever waits. On one Redis, a
    /// Redis Cluster and Redlock (there on each node); on ZooKeeper, etcd and PostgreSQL the
    /// acquire fails with [`ErrorKind::Unsupported`]. Only the plain lock has it: on any other
    /// primitive the acquire fails with [`ErrorKind::Config`].
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }

    /// For the [fair lock](crate::LockClient::fair): how long a waiter that stopped trying (it
    /// died, or its process paused) keeps its place in the queue, on the server's clock (default
    /// 10 s, at least 30 ms). A live waiter tries again at least every third of it. On any other
    /// primitive the acquire fails with [`ErrorKind::Config`].
    pub fn queue_timeout(mut self, timeout: Duration) -> Self {
        self.queue_timeout = Some(timeout.max(Duration::from_millis(30)));
        self
    }

    /// A fixed lease: no watchdog renewal; the lock frees itself after `lease` (at least 10 ms)
    /// and the guard reports it lost shortly before.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease.max(Duration::from_millis(10)));
        self
    }

    /// Waits up to `wait` while someone else holds the lock (default: try once).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }
}

impl<'a> IntoFuture for Acquire<'a> {
    type Output = Result<LockGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<LockGuard>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let span = tracing::debug_span!("lockkit.acquire", lock = %self.name);
        Box::pin(acquire(self).instrument(span))
    }
}

/// The outcome of one attempt.
enum Attempt {
    Granted(LockGuard),
    /// Held by someone else, who has this much lease left (None: no expiry set, or unknown).
    Held(Option<Duration>),
    /// Nobody won a vote (Redlock): retry after a jittered pause.
    Contested,
}

async fn acquire(request: Acquire<'_>) -> Result<LockGuard> {
    let core = request.core;
    let kind = match (request.kind, request.lock_delay, request.queue_timeout) {
        (HoldKind::Lock { .. }, Some(delay), None) => HoldKind::Lock { delay },
        (HoldKind::Fair { .. }, None, Some(queue_timeout)) => HoldKind::Fair { queue_timeout },
        (HoldKind::Permit { permits: 0 }, ..) => {
            return Err(Error::new(ErrorKind::Config, "a semaphore needs at least one permit"));
        }
        (kind, None, None) => kind,
        _ => {
            return Err(Error::new(
                ErrorKind::Config,
                "a lock-delay applies to the plain lock only, a queue timeout to the fair lock only",
            ));
        }
    };
    // Shared by the attempts, the undo of a cancelled one and the lease: built once.
    let hold = Arc::new(Hold::new(LockKeys::new(&core.config.prefix, request.name)?, kind));
    let keys = &hold.keys;
    // A waiter's place (a fair lock's queue entry, a ZooKeeper or etcd waiting node) must not
    // outlive its acquire: left when it gives up or is dropped; a grant turns it into the lock.
    let mut leave = LeaveOnExit::new(core, &hold);
    let started = Instant::now();
    let deadline = started + request.wait;
    let mut attempts = 1;
    let mut last_error = None;
    // Not listening for wake-ups yet: this attempt need not announce itself if refused (the one
    // right after subscribing does), which lets one Redis take the plain lock without a script.
    match attempt(core, &hold, request.lease, First::Yes).await {
        Ok(Attempt::Granted(guard)) => {
            leave.disarm();
            return Ok(granted(guard, attempts, started));
        }
        Ok(_) => {}
        // A broken connection or a node that just came back: worth another try within the wait.
        Err(e) if e.is_unavailable() && !request.wait.is_zero() => last_error = Some(e),
        Err(e) => return Err(e),
    }
    if !request.wait.is_zero() {
        // Subscribe, then retry at once: a release before the subscription was confirmed would
        // otherwise go unnoticed. Waiting for the confirmation never outlasts the wait; if it
        // comes later, the subscription turns live then.
        let subscription = core
            .backend
            .wake()
            .subscribe(
                &core.backend.wake_channel(&hold),
                hold.wakes_all(),
                deadline.saturating_duration_since(Instant::now()),
            )
            .await;
        let mut backoff = Backoff::default();
        loop {
            // Armed before the attempt, so a release right after it still wakes us.
            let woken = subscription.notify().notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            attempts += 1;
            // A split vote sleeps its jittered pause through: the partial grants' releases would
            // otherwise wake every contender at once, to split again.
            let (pause, wakeable) = match attempt(core, &hold, request.lease, First::No).await {
                Ok(Attempt::Granted(guard)) => {
                    leave.disarm();
                    return Ok(granted(guard, attempts, started));
                }
                // Sleep until a release is announced, or the holder's lease runs out (expiry
                // publishes nothing), or the safety interval passes.
                Ok(Attempt::Held(ttl)) if subscription.is_live() => {
                    last_error = None;
                    let safety = core.config.wake_safety_interval;
                    (ttl.unwrap_or(safety).min(safety) + Duration::from_millis(1), true)
                }
                Ok(Attempt::Held(_)) => (backoff.next(), true),
                Ok(Attempt::Contested) => {
                    last_error = None;
                    (backoff.next(), false)
                }
                Err(e) if e.is_unavailable() => {
                    last_error = Some(e);
                    (backoff.next(), true)
                }
                Err(e) => return Err(e),
            };
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            tokio::select! {
                () = woken.as_mut(), if wakeable => {}
                () = tokio::time::sleep(pause.min(deadline - now)) => {}
            }
        }
    }
    metrics::waited(WaitOutcome::Timeout, started.elapsed());
    Err(last_error.unwrap_or_else(|| Error::timeout(&keys.name, started.elapsed())))
}

fn granted(mut guard: LockGuard, attempts: u32, started: Instant) -> LockGuard {
    let waited = started.elapsed();
    metrics::waited(WaitOutcome::Acquired, waited);
    guard.set_acquisition(attempts, waited);
    guard
}

/// Leaves a waiter's place in the background unless disarmed (by a grant).
struct LeaveOnExit<'a> {
    core: &'a Arc<Core>,
    hold: Option<Arc<Hold>>,
}

impl<'a> LeaveOnExit<'a> {
    fn new(core: &'a Arc<Core>, hold: &Arc<Hold>) -> Self {
        Self { core, hold: core.backend.must_leave(hold).then(|| hold.clone()) }
    }

    fn disarm(&mut self) {
        self.hold = None;
    }
}

impl Drop for LeaveOnExit<'_> {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            let backend = self.core.backend.clone();
            self.core.jobs.background(async move {
                if let Err(e) = backend.leave(&hold).await {
                    tracing::debug!(error = %e, "could not leave a waiter's place; the server drops it at its deadline or session end");
                }
            });
        }
    }
}

/// Whether an attempt is an acquire's first, made before it listens for wake-ups.
#[derive(Clone, Copy, PartialEq, Eq)]
enum First {
    Yes,
    No,
}

/// One attempt: one round trip on one Redis.
async fn attempt(core: &Arc<Core>, hold: &Arc<Hold>, lease: Option<Duration>, first: First) -> Result<Attempt> {
    let result = try_acquire(core, hold, lease, first).await;
    metrics::attempt(match &result {
        Ok(Attempt::Granted(_)) => AttemptOutcome::Acquired,
        Ok(Attempt::Held(_) | Attempt::Contested) => AttemptOutcome::Held,
        Err(_) => AttemptOutcome::Error,
    });
    result
}

async fn try_acquire(core: &Arc<Core>, hold: &Arc<Hold>, lease: Option<Duration>, first: First) -> Result<Attempt> {
    let keys = &hold.keys;
    let (lease, renews) = match lease {
        Some(lease) => (lease, false),
        None => (core.config.default_lease, true),
    };
    if let Some(needs) = hold.needs() {
        core.ensure_supports(needs)?;
    }
    let lease = core.backend.lease_for(lease);
    let token = new_token();
    let sent_at = Moment::now();
    let grant = match first {
        First::Yes => core.backend.acquire_first(hold, &token, lease, &core.jobs).await?,
        First::No => core.backend.acquire(hold, &token, lease, &core.jobs).await?,
    };
    let fence = match grant {
        Grant::Granted(fence) => fence,
        Grant::Held(ttl) => return Ok(Attempt::Held(ttl)),
        Grant::Contested => return Ok(Attempt::Contested),
    };
    let schedule = Schedule::granted(sent_at, lease, renews);
    let now = Moment::now();
    if schedule.is_expired(now) {
        // The answer came after the lease it granted must be presumed over: unusable. Undo it if
        // it is still ours (the answer is in, so the undo follows the grant), and let the caller
        // retry.
        tracing::warn!(lock = %keys.name, after = ?(now - sent_at), "grant answered too late; undoing it");
        metrics::late_grant();
        let (backend, hold) = (core.backend.clone(), hold.clone());
        core.jobs.background(async move {
            let _ = backend.release(&hold, &token).await;
        });
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!("the grant of lock {:?} was answered after its {lease:?} lease had run out", keys.name),
        ));
    }
    metrics::granted(fence);
    let next_event = schedule.next_event();
    let lease = Arc::new(Lease::new(core.registry.next_id(), Arc::clone(hold), token, fence, schedule));
    core.registry.insert(lease.clone(), next_event);
    Ok(Attempt::Granted(LockGuard::new(core.clone(), lease)))
}

/// Jittered exponential backoff for when wake-ups cannot be relied on (connection down, Redis
/// errors): 10 ms doubling to 500 ms, each pause drawn from its upper half.
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Self(Duration::from_millis(10))
    }
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let cap = self.0;
        self.0 = (self.0 * 2).min(Duration::from_millis(500));
        rand::random_range(cap / 2..=cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_jittered_and_bounded() {
        let mut backoff = Backoff::default();
        let pauses: Vec<_> = (0..12).map(|_| backoff.next()).collect();
        assert!(pauses[0] >= Duration::from_millis(5) && pauses[0] <= Duration::from_millis(10));
        assert!(pauses.iter().all(|p| *p <= Duration::from_millis(500)));
        assert!(pauses[11] >= Duration::from_millis(250));
    }
}
