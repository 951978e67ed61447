//! The thread this instance's batchers run on, with the connections they commit on.
//!
//! An owner has one batch in flight, so from the moment PostgreSQL answers a batch until the next
//! one reaches it, that owner's backend has nothing to do. On an HTTP worker that moment lasts as
//! long as the requests the worker has queued: the answer is read, the batcher woken and its next
//! batch written in three turns of a queue that holds hundreds of requests at capacity. On a
//! thread of their own, the batchers and their connections are all there is to run, so the next
//! batch leaves as soon as the answer arrives, while the worker answers the orders of the last
//! one. The connections must live here as well: a connection is driven by a task on the thread
//! that made it, which is why batches take theirs from a pool of their own (`Db::commit_batch`),
//! whose connections only this thread asks for, and so makes.

use std::{future::Future, time::Duration};

use tokio::{runtime::Handle, task::JoinHandle};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// The name the thread carries (in `top -H`, `perf` and panics).
pub(crate) const THREAD_NAME: &str = "seckill-batches";

/// A thread with a single-threaded runtime for the batchers. Dropping it stops the thread once
/// the batchers still running have ended, or after the drain it was started with, whichever
/// comes first; batchers still running then are dropped.
pub(crate) struct BatchThread {
    handle: Handle,
    batchers: TaskTracker,
    stop: CancellationToken,
}

impl BatchThread {
    /// Starts the thread. `drain`: how long, once dropped, it waits for batchers to end (a batch
    /// in flight ends within its write bound).
    pub(crate) fn start(drain: Duration) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let handle = runtime.handle().clone();
        let (batchers, stop) = (TaskTracker::new(), CancellationToken::new());
        let (running, stopped) = (batchers.clone(), stop.clone());
        std::thread::Builder::new().name(THREAD_NAME.into()).spawn(move || {
            runtime.block_on(async {
                stopped.cancelled().await;
                running.close();
                if tokio::time::timeout(drain, running.wait()).await.is_err() {
                    tracing::warn!(batchers = running.len(), "batchers still running when the batch thread stopped; dropping them");
                }
            });
        })?;
        Ok(Self { handle, batchers, stop })
    }

    /// Runs `task` on the thread.
    pub(crate) fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.batchers.spawn_on(task, &self.handle)
    }
}

impl Drop for BatchThread {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_run_on_the_batch_thread_until_it_is_dropped() {
        let thread = BatchThread::start(Duration::from_secs(5)).unwrap();

        let name = thread.spawn(async { std::thread::current().name().map(str::to_owned) }).await.unwrap();
        assert_eq!(name.as_deref(), Some(THREAD_NAME));

        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let waiting = thread.spawn(async move { rx.await.is_ok() });
        drop(thread);
        tx.send(()).unwrap();
        assert!(waiting.await.unwrap(), "a batcher still running when the thread is dropped finishes");
    }

    #[tokio::test]
    async fn a_batcher_that_outlives_the_drain_is_dropped() {
        let thread = BatchThread::start(Duration::from_millis(50)).unwrap();

        let stuck = thread.spawn(std::future::pending::<()>());
        drop(thread);

        assert!(stuck.await.unwrap_err().is_cancelled());
    }
}
