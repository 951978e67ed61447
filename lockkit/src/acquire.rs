//! Acquiring a lock: one script round trip per attempt, and a wait loop that sleeps until a
//! release is announced instead of polling.

use std::{
    future::{Future, IntoFuture},
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant},
};

use tracing::Instrument;

use crate::{
    backend::Grant,
    clock::Moment,
    core::Core,
    error::{Error, ErrorKind, Result},
    guard::LockGuard,
    keys::LockKeys,
    lease::{Lease, Schedule},
    metrics,
};

/// A pending acquisition, configured with builder methods and run by `.await`.
/// Made by [`LockClient::acquire`](crate::LockClient::acquire).
///
/// Cancel-safe: if the future is dropped after Redis granted the lock, the lock is released in
/// the background instead of lingering until its lease ends.
#[derive(Debug)]
#[must_use = "an acquire does nothing until awaited"]
pub struct Acquire<'a> {
    core: &'a Arc<Core>,
    name: &'a str,
    lease: Option<Duration>,
    wait: Duration,
}

impl<'a> Acquire<'a> {
    pub(crate) fn new(core: &'a Arc<Core>, name: &'a str) -> Self {
        Self { core, name, lease: None, wait: Duration::ZERO }
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
    // Shared by the attempts, the undo of a cancelled one and the lease: built once.
    let keys = Arc::new(LockKeys::new(&core.config.prefix, request.name)?);
    let started = Instant::now();
    let deadline = started + request.wait;
    let mut attempts = 1;
    let mut last_error = None;
    match attempt(core, &keys, request.lease).await {
        Ok(Attempt::Granted(guard)) => return Ok(granted(guard, attempts, started)),
        Ok(_) => {}
        // A broken connection or a node that just came back: worth another try within the wait.
        Err(e) if e.is_unavailable() && !request.wait.is_zero() => last_error = Some(e),
        Err(e) => return Err(e),
    }
    if !request.wait.is_zero() {
        // Subscribe, then retry at once: a release before the subscription was confirmed would
        // otherwise go unnoticed. Waiting for the confirmation never outlasts the wait; if it
        // comes later, the subscription turns live then.
        let subscription =
            core.backend.wake().subscribe(&keys.released, deadline.saturating_duration_since(Instant::now())).await;
        let mut backoff = Backoff::default();
        loop {
            // Armed before the attempt, so a release right after it still wakes us.
            let woken = subscription.notify().notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            attempts += 1;
            // A split vote sleeps its jittered pause through: the partial grants' releases would
            // otherwise wake every contender at once, to split again.
            let (pause, wakeable) = match attempt(core, &keys, request.lease).await {
                Ok(Attempt::Granted(guard)) => return Ok(granted(guard, attempts, started)),
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
    metrics::waited("timeout", started.elapsed());
    Err(last_error.unwrap_or_else(|| Error::timeout(&keys.name, started.elapsed())))
}

fn granted(mut guard: LockGuard, attempts: u32, started: Instant) -> LockGuard {
    let waited = started.elapsed();
    metrics::waited("acquired", waited);
    guard.set_acquisition(attempts, waited);
    guard
}

/// One round trip of the acquire script.
async fn attempt(core: &Arc<Core>, keys: &Arc<LockKeys>, lease: Option<Duration>) -> Result<Attempt> {
    let result = try_acquire(core, keys, lease).await;
    metrics::attempt(match &result {
        Ok(Attempt::Granted(_)) => "acquired",
        Ok(Attempt::Held(_) | Attempt::Contested) => "held",
        Err(_) => "error",
    });
    result
}

async fn try_acquire(core: &Arc<Core>, keys: &Arc<LockKeys>, lease: Option<Duration>) -> Result<Attempt> {
    let (lease, renews) = match lease {
        Some(lease) => (lease, false),
        None => (core.config.default_lease, true),
    };
    let token = new_token();
    let sent_at = Moment::now();
    let fence = match core.backend.acquire(keys, &token, lease, &core.jobs).await? {
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
        let (backend, keys_owned) = (core.backend.clone(), keys.clone());
        core.jobs.background(async move {
            let _ = backend.release(&keys_owned, &token).await;
        });
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!("the grant of lock {:?} was answered after its {lease:?} lease had run out", keys.name),
        ));
    }
    metrics::granted(fence);
    let next_event = schedule.next_event();
    let lease = Arc::new(Lease::new(core.registry.next_id(), Arc::clone(keys), token, fence, schedule));
    core.registry.insert(lease.clone(), next_event);
    Ok(Attempt::Granted(LockGuard::new(core.clone(), lease)))
}

/// A random 128-bit owner token (hex). Generated by a CSPRNG; never accepted from outside.
fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
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
    fn tokens_are_128_random_bits() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }

    #[test]
    fn backoff_is_jittered_and_bounded() {
        let mut backoff = Backoff::default();
        let pauses: Vec<_> = (0..12).map(|_| backoff.next()).collect();
        assert!(pauses[0] >= Duration::from_millis(5) && pauses[0] <= Duration::from_millis(10));
        assert!(pauses.iter().all(|p| *p <= Duration::from_millis(500)));
        assert!(pauses[11] >= Duration::from_millis(250));
    }
}
