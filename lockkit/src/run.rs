//! Running work under a lock: [`LockGuard::run`] and [`LockClient::with_lock`] drive the work
//! while the lease holds, drop it at its next await once the lease is lost, and release the lock
//! when the work ends, whatever it returned. What they cannot stop (a write already sent) is the
//! fence's job, which is why the work is handed the fence.

use std::{
    future::{Future, poll_fn},
    pin::pin,
    task::Poll,
    time::Duration,
};

use crate::{
    Fence, LockClient, LockGuard,
    model::error::{Error, Result},
};

impl LockGuard {
    /// Runs `work` while the lease holds, then releases the lock.
    ///
    /// - The work ends first, with any output (an `Err` of its own included): the lock is
    ///   released and the output comes back as `Ok(output)`, untouched. Like
    ///   [`tokio::time::timeout`], the lock's outcome is the outer `Result` and the work's own is
    ///   inside it, so the work keeps its error type (`guard.run(work).await??` with `anyhow`, or a
    ///   `match`).
    /// - The lease is lost first: the work is dropped and the result is an [`Error`] with
    ///   [`Error::is_lost`], whose [`Error::lease_loss`] says why. The release is handed to the
    ///   background (the servers that could not renew the lease may not answer a release
    ///   either), as when a guard is dropped.
    ///
    /// # What "dropped at its next await" means
    ///
    /// Rust cancels a future by no longer polling it and dropping it. The work runs inside this
    /// future; once the lease is lost, it is not resumed from the `.await` it is suspended at,
    /// and everything it owns is dropped. Until then nothing interrupts it: code between two
    /// awaits runs to the next one (a blocking call or a busy loop is not preempted), and tasks
    /// it spawned run on. The loss is checked against the lease's local deadline before every
    /// poll of the work, so a holder that was paused past its lease does not resume the work.
    ///
    /// Dropping a future unsends nothing. A write the work had already sent (a query on the wire,
    /// a request a server has queued) may still be applied **after** the loss, when another
    /// holder may already have the lock. That is what the [fence](LockGuard::fence) is for: pass
    /// it into every write, and let the store refuse a fence older than one it has seen.
    ///
    /// If the work finished but the release then finds the lease already ended, or fails (the
    /// release then goes on in the background), the work's output is still returned, and a
    /// warning is logged: the work did finish, and its writes were as safe as their fences.
    /// Dropping the future that `run` returns drops the work and releases in the background.
    ///
    /// ```no_run
    /// # async fn demo(client: lockkit::LockClient) -> lockkit::Result<()> {
    /// # async fn copy_batch(_: lockkit::Fence) -> Result<u64, std::io::Error> { Ok(0) }
    /// let guard = client.lock("nightly-export", std::time::Duration::from_secs(2)).await?;
    /// let fence = guard.fence();
    /// match guard.run(copy_batch(fence)).await {
    ///     Ok(Ok(rows)) => println!("copied {rows} rows under fence {fence}"),
    ///     Ok(Err(e)) => eprintln!("the export failed (the lock is released): {e}"),
    ///     Err(e) if e.is_lost() => eprintln!("stopped: {e}; writes fenced with {fence} may still land"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn run<F: Future>(self, work: F) -> Result<F::Output> {
        let outcome = {
            let mut lost = pin!(self.lost());
            let mut work = pin!(work);
            poll_fn(|cx| {
                // The loss first, read from the clock itself (`loss()` compares the local deadline
                // with it): a waker that fires after a pause must not resume the work before the
                // deadline's own timer has run. `lost` then registers for the next loss signal.
                if let Some(cause) = self.loss() {
                    return Poll::Ready(Err(cause));
                }
                if let Poll::Ready(cause) = lost.as_mut().poll(cx) {
                    return Poll::Ready(Err(cause));
                }
                work.as_mut().poll(cx).map(Ok)
            })
            .await
            // The work is dropped here, before the error is returned or the release starts.
        };
        match outcome {
            Err(cause) => Err(Error::work_stopped(self.name(), cause)),
            Ok(output) => {
                let name = self.name().to_owned();
                match self.release().await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(lock = %name, "the work finished, but its lease had ended before the release")
                    }
                    Err(e) => {
                        tracing::warn!(lock = %name, error = %e, "the work finished; the release failed and goes on in the background")
                    }
                }
                Ok(output)
            }
        }
    }
}

impl LockClient {
    /// Waits up to `wait` for the lock `name`, then runs `work(fence)` under it with
    /// [`LockGuard::run`]: the lock is released when the work ends, and the work is dropped at
    /// its next await if the lease is lost first ([`Error::is_lost`]). Fails like
    /// [`lock`](Self::lock) when the lock stays held ([`Error::is_timeout`]).
    ///
    /// The work is given the grant's fence: put it in every write, so that a write sent before
    /// the loss and applied after it is refused by the store (see [`LockGuard::run`] for what
    /// dropping the work can and cannot undo).
    ///
    /// ```no_run
    /// # async fn demo(client: lockkit::LockClient) -> lockkit::Result<()> {
    /// # async fn fenced_write(_: &str, _: lockkit::Fence) -> Result<(), std::io::Error> { Ok(()) }
    /// use std::time::Duration;
    /// let written = client
    ///     .with_lock("report", Duration::from_secs(2), |fence| async move {
    ///         // The store refuses this write if it has seen a newer fence for the report.
    ///         fenced_write("report body", fence).await
    ///     })
    ///     .await?;
    /// # let _ = written;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<W, F>(&self, name: &str, wait: Duration, work: W) -> Result<F::Output>
    where
        W: FnOnce(Fence) -> F,
        F: Future,
    {
        let guard = self.lock(name, wait).await?;
        let fence = guard.fence();
        guard.run(work(fence)).await
    }
}
