//! Grants kept as members of a sorted set, each scored by its own expiry on the server's clock:
//! the permits of a semaphore, the readers of a read-write lock, the grants of a reentrant lock.
//!
//! Why one member per grant rather than a counter under one key's TTL: a grant whose holder died
//! stops being renewed and drops out by itself when its own expiry passes (every script removes
//! the expired members first), however many live grants keep the key alive. A counter would keep
//! a dead holder's share for as long as anyone else renews.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

use crate::scripts::{self, Call, millis};

/// Owner-checked extension of a member. KEYS: the set, then other keys to keep alive as long.
/// ARGV: token, lease ms. Returns 1 when extended, 0 when the member is gone or expired.
const EXTEND: &str = r"
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= now then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
for i = 1, #KEYS do keep(KEYS[i], ARGV[2]) end
return 1
";

/// Owner-checked release of a member that wakes waiters. KEYS: the set, and optionally a
/// reentrant lock's hash, deleted when its last grant leaves. ARGV: token, channel. The set then
/// expires with its latest member, so members of dead holders leave no key behind.
/// Returns 1 when the member was still live, 0 otherwise.
const RELEASE: &str = r"
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
if latest then redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(latest) - now)) end
if KEYS[2] and redis.call('ZCARD', KEYS[1]) == 0 and redis.call('TYPE', KEYS[2])['ok'] == 'hash' then
  redis.call('DEL', KEYS[2])
end
redis.call('PUBLISH', ARGV[2], '1')
if tonumber(s) > now then return 1 end
return 0
";

static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| scripts::with_prelude(EXTEND));
static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| scripts::with_prelude(RELEASE));

/// Extends `token`'s member of the set `keys[0]` (and keeps `keys[1..]` alive as long).
pub(crate) fn extend(keys: Vec<String>, token: &str, lease: Duration) -> Call {
    Call::new(&EXTEND_SCRIPT, keys, vec![token.to_owned(), millis(lease).to_string()])
}

/// Releases `token`'s member of the set `keys[0]` (deleting the hash `keys[1]`, if given, with the
/// last member) and publishes on `channel`.
pub(crate) fn release(keys: Vec<String>, token: &str, channel: &str) -> Call {
    Call::new(&RELEASE_SCRIPT, keys, vec![token.to_owned(), channel.to_owned()])
}
