//! The multi-lock: several plain locks taken all-or-nothing. The names are sorted and
//! deduplicated first, and taken one after the other in that canonical order, so two multi-locks
//! over overlapping sets can never wait for each other in a cycle (no deadlock); if one lock
//! cannot be had within the wait, the ones already taken are released before the error returns
//! (a partial acquisition is undone). Each lock keeps its own fence.
//!
//! Built on the plain lock alone, so it works on every backend, Redlock included.

use std::{
    future::{Future, IntoFuture},
    pin::Pin,
    time::{Duration, Instant},
};

use futures_util::future::{join_all, select_all};

use crate::{
    LockClient, LockGuard,
    model::{error::Result, fence::Fence, lease_loss::LeaseLoss},
};

/// A pending multi-lock acquisition, run by `.await`. Made by [`LockClient::multi`].
#[derive(Debug)]
#[must_use = "an acquire does nothing until awaited"]
pub struct MultiAcquire<'a> {
    client: &'a LockClient,
    names: Vec<&'a str>,
    lease: Option<Duration>,
    wait: Duration,
}

impl MultiAcquire<'_> {
    /// A fixed lease for every lock (no watchdog), as [`Acquire::lease`](crate::Acquire::lease).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Waits up to `wait` in all (not per lock) while locks are held by others (default: try
    /// each once).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }
}

impl<'a> IntoFuture for MultiAcquire<'a> {
    type Output = Result<MultiGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<MultiGuard>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(acquire_all(self))
    }
}

async fn acquire_all(request: MultiAcquire<'_>) -> Result<MultiGuard> {
    let mut names = request.names;
    names.sort_unstable();
    names.dedup();
    let deadline = Instant::now() + request.wait;
    let mut guards = Vec::with_capacity(names.len());
    for name in names {
        let mut acquire = request.client.acquire(name).wait(deadline.saturating_duration_since(Instant::now()));
        if let Some(lease) = request.lease {
            acquire = acquire.lease(lease);
        }
        match acquire.await {
            Ok(guard) => guards.push(guard),
            Err(e) => {
                // Undo the partial acquisition before answering (were this future dropped
                // instead, the guards' drops would release them in the background).
                join_all(guards.into_iter().map(LockGuard::release)).await;
                return Err(e);
            }
        }
    }
    Ok(MultiGuard { guards })
}

/// Several locks held together. One fence per lock ([`fences`](Self::fences)); lost as soon as
/// any one of them is lost. Dropping it releases every lock in the background, like a
/// [`LockGuard`].
#[derive(Debug)]
#[must_use = "the locks are released as soon as the guard is dropped; keep it while you work"]
pub struct MultiGuard {
    /// In canonical (sorted) name order.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// Each lock's name and fence, sorted by name.
    pub fn fences(&self) -> Vec<(&str, Fence)> {
        self.guards.iter().map(|g| (g.name(), g.fence())).collect()
    }

    /// The guards, sorted by name.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Whether any of the leases has been lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Completes when any of the leases is lost, with its cause.
    pub fn lost(&self) -> impl Future<Output = LeaseLoss> + Send + 'static {
        let losses: Vec<_> = self.guards.iter().map(|g| Box::pin(g.lost())).collect();
        async move {
            if losses.is_empty() {
                return std::future::pending().await;
            }
            select_all(losses).await.0
        }
    }

    /// Releases every lock (owner-checked, concurrently). `Ok(true)` when all were still held;
    /// the first error otherwise, after every release was tried.
    pub async fn release(self) -> Result<bool> {
        let mut all_held = true;
        let mut first_error = None;
        for outcome in join_all(self.guards.into_iter().map(LockGuard::release)).await {
            match outcome {
                Ok(held) => all_held &= held,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(all_held), Err)
    }
}

impl LockClient {
    /// Several plain locks, all or nothing, taken in a canonical order (sorted names) so that
    /// multi-locks over overlapping sets cannot deadlock; if one cannot be had within the wait,
    /// those already taken are released. Duplicate names count once.
    ///
    /// ```no_run
    /// # async fn demo(client: lockkit::LockClient) -> lockkit::Result<()> {
    /// use std::time::Duration;
    /// let both = client.multi(&["account:7", "account:3"]).wait(Duration::from_secs(2)).await?;
    /// for (name, fence) in both.fences() {
    ///     println!("{name} under fence {fence}");
    /// }
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn multi<'a>(&'a self, names: &[&'a str]) -> MultiAcquire<'a> {
        MultiAcquire { client: self, names: names.to_vec(), lease: None, wait: Duration::ZERO }
    }
}
