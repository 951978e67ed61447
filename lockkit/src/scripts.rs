//! The Lua scripts behind every lock operation. Each is hashed once and run with `EVALSHA`;
//! `NOSCRIPT` (after a Redis restart or `SCRIPT FLUSH`) reloads it transparently.
//!
//! Every script touches only keys of one lock, which share a hash tag, so they are cluster-safe.
//! The typed calls at the end run on any connection: one Redis, a cluster, or one Redlock node.

use std::{sync::LazyLock, time::Duration};

use redis::{Script, aio::ConnectionLike};

use crate::keys::LockKeys;

/// Grants the lock if free: `SET NX PX` of the owner token plus `INCR` of the fence counter.
/// KEYS: lock, fence. ARGV: token, lease ms.
/// Returns `{1, fence}` when granted, `{0, pttl}` when held (pttl is -1 for a key without expiry).
const ACQUIRE: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
";

/// Owner-checked compare-and-delete that wakes waiters. KEYS: lock. ARGV: token, channel.
/// Returns 1 when we still held the lock, 0 otherwise.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
";

/// Owner-checked `PEXPIRE`. KEYS: lock. ARGV: token, lease ms. Returns 1 when extended.
const EXTEND: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Atomic max of the fence counter. KEYS: fence. ARGV: n (decimal, no leading zeros).
/// Compares decimal strings (length, then lexically) so values above 2^53 stay exact, which Lua's
/// doubles would not. Returns the counter's value afterwards, as a string.
const ENSURE_FENCE_AT_LEAST: &str = r"
local cur = redis.call('GET', KEYS[1]) or '0'
local n = ARGV[1]
if #cur < #n or (#cur == #n and cur < n) then
  redis.call('SET', KEYS[1], n)
  return n
end
return cur
";

/// The loaded scripts; built once per process.
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) extend: Script,
    pub(crate) ensure_fence_at_least: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::new(ACQUIRE),
    release: Script::new(RELEASE),
    extend: Script::new(EXTEND),
    ensure_fence_at_least: Script::new(ENSURE_FENCE_AT_LEAST),
});

/// An `EVALSHA` of the extend script as a plain command, so that many can be pipelined.
fn extend_cmd(lock_key: &str, token: &str, lease_ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(SCRIPTS.extend.get_hash()).arg(1).arg(lock_key).arg(token).arg(lease_ms);
    cmd
}

/// True when the error means the script cache was flushed and the script must be loaded again.
fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// A duration as a script's millisecond argument: whole milliseconds, at least 1 (Redis refuses
/// `PX 0`).
pub(crate) fn millis(d: Duration) -> u64 {
    (d.as_millis() as u64).max(1)
}

/// What the acquire script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Granted; the node's fence counter after its increment.
    Granted(u64),
    /// Held by someone else, with this lease left (`None`: no expiry).
    Held(Option<Duration>),
}

/// Runs the acquire script for `token` with a lease of `lease`.
pub(crate) async fn acquire(
    conn: &mut impl ConnectionLike,
    keys: &LockKeys,
    token: &str,
    lease: Duration,
) -> redis::RedisResult<AcquireReply> {
    let mut invocation = SCRIPTS.acquire.prepare_invoke();
    invocation.key(&keys.lock).key(&keys.fence).arg(token).arg(millis(lease));
    let (granted, value): (i64, i64) = invocation.invoke_async(conn).await?;
    Ok(if granted == 1 {
        AcquireReply::Granted(value.max(0) as u64)
    } else {
        AcquireReply::Held((value > 0).then(|| Duration::from_millis(value as u64)))
    })
}

/// Runs the owner-checked release; true when `token` still held the lock.
pub(crate) async fn release(conn: &mut impl ConnectionLike, keys: &LockKeys, token: &str) -> redis::RedisResult<bool> {
    let mut invocation = SCRIPTS.release.prepare_invoke();
    invocation.key(&keys.lock).arg(token).arg(&keys.released);
    Ok(invocation.invoke_async::<i64>(conn).await? == 1)
}

/// Runs the owner-checked extension; true when `token` still held the lock.
pub(crate) async fn extend(
    conn: &mut impl ConnectionLike,
    keys: &LockKeys,
    token: &str,
    lease: Duration,
) -> redis::RedisResult<bool> {
    let mut invocation = SCRIPTS.extend.prepare_invoke();
    invocation.key(&keys.lock).arg(token).arg(millis(lease));
    Ok(invocation.invoke_async::<i64>(conn).await? == 1)
}

/// Raises the fence counter to at least `at_least`; returns its value afterwards.
pub(crate) async fn raise_fence(
    conn: &mut impl ConnectionLike,
    keys: &LockKeys,
    at_least: u64,
) -> redis::RedisResult<u64> {
    let mut invocation = SCRIPTS.ensure_fence_at_least.prepare_invoke();
    invocation.key(&keys.fence).arg(at_least.to_string());
    let value: String = invocation.invoke_async(conn).await?;
    value
        .parse()
        .map_err(|_| redis::RedisError::from((redis::ErrorKind::Parse, "the fence counter is not a number", value)))
}

/// Extends many leases on one connection in a single pipelined round trip (loading the script
/// first if the server lost it). One reply per lease, true where it was still ours.
pub(crate) async fn extend_pipelined<'a>(
    conn: &mut impl ConnectionLike,
    leases: impl IntoIterator<Item = (&'a LockKeys, &'a str, Duration)>,
) -> redis::RedisResult<Vec<bool>> {
    let mut pipe = redis::pipe();
    for (keys, token, lease) in leases {
        pipe.add_command(extend_cmd(&keys.lock, token, millis(lease)));
    }
    let replies: Vec<i64> = match pipe.query_async(conn).await {
        Err(e) if is_noscript(&e) => {
            SCRIPTS.extend.prepare_invoke().load_async(conn).await?;
            pipe.query_async(conn).await?
        }
        result => result?,
    };
    Ok(replies.into_iter().map(|reply| reply == 1).collect())
}
