//! [`Jobs`]: the queue of work that code which cannot await (a `Drop`) hands to the watchdog task,
//! and a count of what is unfinished, so that [`LockClient::flush`](crate::LockClient::flush)
//! can wait for it.

use std::{
    pin::Pin,
    sync::{Arc, atomic::Ordering},
};

use tokio::sync::mpsc;

/// Work handed to the watchdog task by code that cannot await (a `Drop`): the release of a guard
/// dropped without a completed `release()`, the undo of an acquire that was cancelled while its
/// request was in flight, or whose grant came too late to be used.
pub(crate) type Job = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The queue of [`Job`]s to the watchdog task, and a count of those not finished yet.
#[derive(Debug, Clone)]
pub(crate) struct Jobs {
    queue: mpsc::UnboundedSender<Job>,
    unfinished: Arc<Unfinished>,
}

/// Jobs queued or running, and a signal each time one finishes.
#[derive(Debug, Default)]
pub(crate) struct Unfinished {
    count: std::sync::atomic::AtomicUsize,
    finished: tokio::sync::Notify,
}

impl Unfinished {
    /// One job is done.
    pub(crate) fn done(&self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
        self.finished.notify_waiters();
    }
}

impl Jobs {
    /// A queue into `queue`.
    pub(crate) fn new(queue: mpsc::UnboundedSender<Job>) -> Self {
        Self { queue, unfinished: Arc::default() }
    }

    /// The count the watchdog decrements as jobs finish.
    pub(crate) fn unfinished(&self) -> Arc<Unfinished> {
        self.unfinished.clone()
    }

    /// Queues `job`. If the watchdog is gone (the runtime is shutting down), it is dropped: leases
    /// then simply expire.
    pub(crate) fn send(&self, job: Job) {
        self.unfinished.count.fetch_add(1, Ordering::AcqRel);
        if self.queue.send(job).is_err() {
            self.unfinished.done();
        }
    }

    /// Waits until every job queued so far has finished, or `within` has passed; true if they
    /// all finished.
    pub(crate) async fn flush(&self, within: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let finished = self.unfinished.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            if self.unfinished.count.load(Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, finished).await.is_err() {
                return false;
            }
        }
    }

    /// Queues `work` to run in the background.
    pub(crate) fn background(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.send(Box::pin(work));
    }
}
