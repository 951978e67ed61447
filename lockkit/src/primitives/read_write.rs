//! The constructor of the read-write primitive; its scripts and keys are in the Redis layer
//! (`backend::redis::read_write`).

use std::sync::Arc;

use crate::{
    Acquire, LockClient, LockGuard,
    backend::redis::read_write,
    clock::Moment,
    lease::{Lease, Schedule},
    model::{
        backend_kind::Capability,
        error::{Error, ErrorKind, Result},
        hold::{Hold, HoldKind},
        token::new_token,
    },
};

/// A read-write lock on one name; take a side with [`read`](Self::read) or
/// [`write`](Self::write). Made by [`LockClient::read_write`].
#[derive(Debug, Clone, Copy)]
#[must_use = "a read-write lock does nothing until you take a side with read() or write()"]
pub struct ReadWriteLock<'a> {
    client: &'a LockClient,
    name: &'a str,
    prefer_writers: bool,
}

impl<'a> ReadWriteLock<'a> {
    /// Whether a waiting writer keeps new readers out (default `true`), so that readers cannot
    /// starve writers. With `false`, readers get in whenever no writer holds the lock.
    pub fn prefer_writers(mut self, prefer: bool) -> Self {
        self.prefer_writers = prefer;
        self
    }

    /// A read share: granted while no writer holds the lock (nor, with writer preference, waits
    /// for it). Its fence is that of the latest write grant (0 before any).
    pub fn read(self) -> Acquire<'a> {
        Acquire::of(self.client.core(), self.name, HoldKind::Read)
    }

    /// The write lock: granted when no writer and no live reader holds it. Its fence is larger than
    /// that of every earlier write grant.
    pub fn write(self) -> Acquire<'a> {
        let mark = self.prefer_writers.then(|| self.client.core().config.wake_safety_interval * 2);
        Acquire::of(self.client.core(), self.name, HoldKind::Write { prefer_writers: mark })
    }
}

impl LockClient {
    /// A read-write lock on `name`: many readers or one writer, each grant a lease renewed by the
    /// watchdog. A writer may [`downgrade`](LockGuard::downgrade) to a reader.
    ///
    /// Only on one Redis or a Redis Cluster: on Redlock, ZooKeeper, etcd and PostgreSQL the acquire
    /// fails with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    ///
    /// ```no_run
    /// # async fn demo(client: lockkit::LockClient) -> lockkit::Result<()> {
    /// use std::time::Duration;
    /// let writer = client.read_write("catalog").write().wait(Duration::from_secs(1)).await?;
    /// // ... rebuild the catalog under writer.fence() ...
    /// let reader = writer.downgrade().await?; // keep reading what we wrote; readers may join
    /// reader.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read_write<'a>(&'a self, name: &'a str) -> ReadWriteLock<'a> {
        ReadWriteLock { client: self, name, prefer_writers: true }
    }
}

impl LockGuard {
    /// Turns a write grant of a [read-write lock](LockClient::read_write) into a read share in
    /// one atomic step (no writer can get in between), keeping the fence. Readers waiting for the
    /// writer are woken. The read share is a new lease with its own token, renewed like the write
    /// grant was.
    ///
    /// Fails with [`ErrorKind::Config`] on any other guard, and with [`Error::is_lost`] if the
    /// write lease had already ended. Cancel-safe like [`release`](Self::release): dropped before
    /// it completed, the write grant is released in the background (a read share it may have
    /// created then simply expires).
    pub async fn downgrade(mut self) -> Result<LockGuard> {
        if !matches!(self.lease.hold.kind, HoldKind::Write { .. }) {
            return Err(Error::new(ErrorKind::Config, "only a write guard of a read-write lock can downgrade"));
        }
        let core = self.core.clone();
        let scripts = core.scripts_for(Capability::ReadWrite)?;
        let (lease, renews) = {
            let state = self.lease.state.lock().await;
            (state.schedule.lease(), state.schedule.renews())
        };
        if self.lease.check().is_some() {
            return Err(Error::lease_lost(self.name()));
        }
        // No renewal of the write grant may run after the key changed hands.
        core.stop_watching(&self.lease).await;
        let held = self.lease.clone();
        let keys = &held.hold.keys;
        let read_token = new_token();
        let sent_at = Moment::now();
        // An error leaves the guard unreleased: its drop releases the write grant.
        let downgraded = read_write::downgrade(scripts, keys, &self.lease.token, &read_token, lease).await?;
        self.lease.release_confirmed.store(true, std::sync::atomic::Ordering::Release);
        self.mark_released();
        if !downgraded {
            return Err(Error::lease_lost(self.name()));
        }
        let hold = Arc::new(Hold::new(keys.clone(), HoldKind::Read));
        let schedule = Schedule::granted(sent_at, lease, renews);
        let next_event = schedule.next_event();
        // No write grant can have come in between: the read share keeps the write fence.
        let read = Arc::new(Lease::new(core.registry.next_id(), hold, read_token, self.fence(), schedule));
        core.registry.insert(read.clone(), next_event);
        Ok(LockGuard::new(core, read))
    }
}
