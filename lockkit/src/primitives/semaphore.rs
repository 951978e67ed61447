//! The constructor of the semaphore primitive; its scripts and keys are in the Redis layer
//! (`backend::redis::semaphore`).

use crate::{Acquire, LockClient, model::hold::HoldKind};

impl LockClient {
    /// One permit of the semaphore `name` of `permits` (at least 1; 0 fails with
    /// [`ErrorKind::Config`](crate::ErrorKind::Config)). The guard holds one permit: its lease is
    /// renewed by the watchdog like a lock's, its [`fence`](crate::LockGuard::fence) is its own
    /// (every permit increments the name's counter), and a permit whose holder died comes back
    /// when its lease ends, timed by Redis.
    ///
    /// Only on one Redis or a Redis Cluster: on Redlock, ZooKeeper, etcd and PostgreSQL the acquire
    /// fails with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    ///
    /// ```no_run
    /// # async fn demo(client: lockkit::LockClient) -> lockkit::Result<()> {
    /// use std::time::Duration;
    /// // At most 4 concurrent exports, whatever the number of workers.
    /// let permit = client.semaphore("exports", 4).wait(Duration::from_secs(10)).await?;
    /// println!("exporting under fence {}", permit.fence());
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore<'a>(&'a self, name: &'a str, permits: u32) -> Acquire<'a> {
        Acquire::of(self.core(), name, HoldKind::Permit { permits })
    }
}
