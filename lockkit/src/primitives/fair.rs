//! The constructor of the fair primitive; its scripts and keys are in the Redis layer
//! (`backend::redis::fair`).

use std::time::Duration;

use crate::{Acquire, LockClient, model::hold::HoldKind};

/// How long a waiter that stopped trying keeps its place, by default.
pub(crate) const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(10);

impl LockClient {
    /// A fair lock on `name`: waiters get it in the order they first tried, and a released lock
    /// goes to the head of the queue, never to a newcomer. A waiter keeps its place while it
    /// keeps trying; one that stopped (it died, or its process paused) loses it
    /// [`queue_timeout`](Acquire::queue_timeout) (10 s by default) after its last attempt, on the
    /// server's clock. Without [`wait`](Acquire::wait) it tries once and leaves the queue.
    ///
    /// Only on one Redis or a Redis Cluster: on Redlock, ZooKeeper, etcd and PostgreSQL the acquire
    /// fails with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    ///
    /// ```no_run
    /// # async fn demo(client: lockkit::LockClient) -> lockkit::Result<()> {
    /// use std::time::Duration;
    /// let guard = client.fair("printer").wait(Duration::from_secs(30)).await?;
    /// guard.release().await?; // the longest waiter gets it next
    /// # Ok(()) }
    /// ```
    pub fn fair<'a>(&'a self, name: &'a str) -> Acquire<'a> {
        Acquire::of(self.core(), name, HoldKind::Fair { queue_timeout: DEFAULT_QUEUE_TIMEOUT })
    }
}
