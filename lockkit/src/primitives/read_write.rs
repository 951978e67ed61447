//! The read-write lock: many readers or one writer. The writer holds `{prefix:name}` like a plain
//! lock (so a plain lock of the same name excludes it); each reader is a member of
//! `{prefix:name}:readers` scored by its expiry (server ms). Both are leases renewed by the
//! watchdog. Every write grant increments the fence counter; a read grant carries the current
//! counter, the fence of the latest write grant.
//!
//! Writer preference (the default): a writer that finds the lock taken sets
//! `{prefix:name}:writer-waiting` for a short while (twice the client's wake safety interval,
//! refreshed by each of its attempts); new readers wait while it exists, so a stream of readers
//! cannot starve writers. A writer that gave up stops refreshing it and readers resume within
//! that while.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

use super::members;
use crate::{
    Acquire, LockClient, LockGuard,
    acquire::new_token,
    clock::Moment,
    error::{Error, ErrorKind, Result},
    hold::{Hold, HoldKind},
    keys::{LockKeys, suffix},
    lease::{Lease, Schedule},
    scripts::{self, Call, millis},
};

/// A read share, unless a writer holds the lock or a preferred writer waits. KEYS: lock, fence,
/// readers, writer-waiting, waiter mark. ARGV: token, lease ms. Returns `{1, current fence}` or
/// `{0, wait ms}`; kept out by a writer (or a plain lock), it announces itself to its release.
const ACQUIRE_READ: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local w = redis.call('PTTL', KEYS[1])
if w ~= -2 then
  announce_waiter(KEYS[5], w)
  return {0, w}
end
local waiting = redis.call('PTTL', KEYS[4])
if waiting > 0 then return {0, waiting} end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
keep(KEYS[3], ARGV[2])
return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
";

/// The write lock, if neither a writer nor a live reader holds it; otherwise (with a positive
/// mark) marks a writer as waiting, and announces itself to the write holder's release. KEYS:
/// lock, fence, readers, writer-waiting, waiter mark. ARGV: token, lease ms, mark ms (0: no writer
/// preference). Returns `{1, fence}` or `{0, wait ms}`.
const ACQUIRE_WRITE: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local wait = nil
local w = redis.call('PTTL', KEYS[1])
if w ~= -2 then
  wait = w
elseif redis.call('ZCARD', KEYS[3]) > 0 then
  wait = tonumber(redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]) - now
end
if wait then
  if tonumber(ARGV[3]) > 0 then redis.call('SET', KEYS[4], '1', 'PX', ARGV[3]) end
  announce_waiter(KEYS[5], wait)
  return {0, wait}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[4])
return {1, redis.call('INCR', KEYS[2])}
";

/// Turns the write grant of `ARGV[1]` into a read share for `ARGV[2]` in one step: no writer can
/// slip in between. KEYS: lock, fence, readers. ARGV: write token, read token, lease ms, channel.
/// Returns `{1, fence}` or `{0, 0}` when the write grant was no longer ours.
const DOWNGRADE: &str = r"
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return {0, 0} end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[2])
keep(KEYS[3], ARGV[3])
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[4], '1')
return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
";

static ACQUIRE_READ_SCRIPT: LazyLock<Script> = LazyLock::new(|| scripts::with_prelude_announcing(ACQUIRE_READ));
static ACQUIRE_WRITE_SCRIPT: LazyLock<Script> = LazyLock::new(|| scripts::with_prelude_announcing(ACQUIRE_WRITE));
static DOWNGRADE_SCRIPT: LazyLock<Script> = LazyLock::new(|| scripts::with_prelude(DOWNGRADE));

fn rw_keys(keys: &LockKeys) -> Vec<String> {
    vec![
        keys.lock.clone(),
        keys.fence.clone(),
        keys.key(suffix::READERS),
        keys.key(suffix::WRITER_WAITING),
        scripts::waiter_mark(keys),
    ]
}

pub(crate) fn acquire_read(keys: &LockKeys, token: &str, lease: Duration) -> Call {
    Call::new(&ACQUIRE_READ_SCRIPT, rw_keys(keys), vec![token.to_owned(), millis(lease).to_string()])
}

pub(crate) fn acquire_write(keys: &LockKeys, token: &str, lease: Duration, prefer_writers: Option<Duration>) -> Call {
    let mark = prefer_writers.map_or(0, millis);
    Call::new(&ACQUIRE_WRITE_SCRIPT, rw_keys(keys), vec![token.to_owned(), millis(lease).to_string(), mark.to_string()])
}

pub(crate) fn extend_read(keys: &LockKeys, token: &str, lease: Duration) -> Call {
    members::extend(vec![keys.key(suffix::READERS)], token, lease)
}

pub(crate) fn release_read(keys: &LockKeys, token: &str) -> Call {
    members::release(vec![keys.key(suffix::READERS)], token, &keys.released, "")
}

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
        let call = Call::new(
            &DOWNGRADE_SCRIPT,
            vec![keys.lock.clone(), keys.fence.clone(), keys.key(suffix::READERS)],
            vec![self.lease.token.clone(), read_token.clone(), millis(lease).to_string(), keys.released.clone()],
        );
        let sent_at = Moment::now();
        // An error leaves the guard unreleased: its drop releases the write grant.
        let reply = core.backend.run(&call).await?;
        let (downgraded, _fence): (i64, u64) = redis::from_redis_value(reply)?;
        self.lease.release_confirmed.store(true, std::sync::atomic::Ordering::Release);
        self.mark_released();
        if downgraded != 1 {
            return Err(Error::lease_lost(self.name()));
        }
        let hold = std::sync::Arc::new(Hold::new(keys.clone(), HoldKind::Read));
        let schedule = Schedule::granted(sent_at, lease, renews);
        let next_event = schedule.next_event();
        // No write grant can have come in between: the read share keeps the write fence.
        let read = std::sync::Arc::new(Lease::new(core.registry.next_id(), hold, read_token, self.fence(), schedule));
        core.registry.insert(read.clone(), next_event);
        Ok(LockGuard::new(core, read))
    }
}
