//! The Lua scripts behind every lock operation. Each is hashed once and run with `EVALSHA`;
//! `NOSCRIPT` (after a Redis restart or `SCRIPT FLUSH`) reloads it transparently.
//!
//! Every script touches only keys of one lock, which share a hash tag, so they are cluster-safe.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

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

/// An `EVALSHA` of the extend script as a plain command, so the watchdog can pipeline many.
pub(crate) fn extend_cmd(lock_key: &str, token: &str, lease_ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(SCRIPTS.extend.get_hash()).arg(1).arg(lock_key).arg(token).arg(lease_ms);
    cmd
}

/// True when the error means the script cache was flushed and the script must be loaded again.
pub(crate) fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// A duration as a script's millisecond argument: whole milliseconds, at least 1 (Redis refuses
/// `PX 0`).
pub(crate) fn millis(d: Duration) -> u64 {
    (d.as_millis() as u64).max(1)
}
