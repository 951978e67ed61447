//! The constructor of the reentrant primitive; its scripts and keys are in the Redis layer
//! (`backend::redis::reentrant`).

use crate::{Acquire, LockClient, model::hold::HoldKind};

impl LockClient {
    /// A reentrant lock on `name` for `owner`: while `owner` holds it, acquiring it again as
    /// `owner` succeeds at once (from any task or process that uses the same owner id), with the
    /// same fence; anyone else waits. Each grant is its own [`LockGuard`](crate::LockGuard),
    /// renewed by the watchdog and released on its own; the lock is free when the last one is
    /// released (or has expired).
    ///
    /// Only on one Redis or a Redis Cluster: on Redlock, ZooKeeper, etcd and PostgreSQL the acquire
    /// fails with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    ///
    /// ```no_run
    /// # async fn demo(client: lockkit::LockClient) -> lockkit::Result<()> {
    /// use std::time::Duration;
    /// let outer = client.reentrant("ledger", "worker-7").wait(Duration::from_secs(1)).await?;
    /// let inner = client.reentrant("ledger", "worker-7").await?; // re-entry: same owner
    /// assert_eq!(inner.fence(), outer.fence());
    /// inner.release().await?;
    /// outer.release().await?; // count 0: free
    /// # Ok(()) }
    /// ```
    pub fn reentrant<'a>(&'a self, name: &'a str, owner: &str) -> Acquire<'a> {
        Acquire::of(self.core(), name, HoldKind::Reentrant { owner: owner.to_owned() })
    }
}
