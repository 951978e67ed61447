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

use super::{
    RedisScripts,
    arg::Arg,
    members,
    scripts::{self, Call, millis},
};
use crate::model::{
    error::Result,
    keys::{LockKeys, suffix},
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

fn rw_keys(keys: &LockKeys) -> [Arg<'_>; 5] {
    [
        Arg::from(&keys.lock),
        (&keys.fence).into(),
        Arg::side(keys, suffix::READERS),
        Arg::side(keys, suffix::WRITER_WAITING),
        scripts::waiter_mark(keys),
    ]
}

pub(crate) fn acquire_read<'a>(keys: &'a LockKeys, token: &'a str, lease: Duration) -> Call<'a> {
    Call::new(&ACQUIRE_READ_SCRIPT, rw_keys(keys), vec![token.to_owned(), millis(lease).to_string()])
}

pub(crate) fn acquire_write<'a>(
    keys: &'a LockKeys,
    token: &'a str,
    lease: Duration,
    prefer_writers: Option<Duration>,
) -> Call<'a> {
    let mark = prefer_writers.map_or(0, millis);
    Call::new(&ACQUIRE_WRITE_SCRIPT, rw_keys(keys), vec![token.to_owned(), millis(lease).to_string(), mark.to_string()])
}

pub(crate) fn extend_read<'a>(keys: &'a LockKeys, token: &'a str, lease: Duration) -> Call<'a> {
    members::extend(vec![keys.key(suffix::READERS)], token, lease)
}

pub(crate) fn release_read<'a>(keys: &'a LockKeys, token: &'a str) -> Call<'a> {
    members::release(vec![keys.key(suffix::READERS)], token, &keys.released, "")
}

/// Turns `token`'s write grant into the read share `read_token` with a lease of `lease` in one
/// step, keeping the fence; false when the write grant was gone.
pub(crate) async fn downgrade(
    scripts: &dyn RedisScripts,
    keys: &LockKeys,
    token: &str,
    read_token: &str,
    lease: Duration,
) -> Result<bool> {
    let call = Call::new(
        &DOWNGRADE_SCRIPT,
        vec![keys.lock.clone(), keys.fence.clone(), keys.key(suffix::READERS)],
        vec![token.to_owned(), read_token.to_owned(), millis(lease).to_string(), keys.released.clone()],
    );
    let (downgraded, _fence): (i64, u64) = redis::from_redis_value(scripts.run(&call).await?)?;
    Ok(downgraded == 1)
}
