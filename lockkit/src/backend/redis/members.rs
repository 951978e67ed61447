//! Grants kept as members of a sorted set, each scored by its own expiry on the server's clock:
//! the permits of a semaphore, the readers of a read-write lock, the grants of a reentrant lock.
//!
//! Why one member per grant rather than a counter under one key's TTL: a grant whose holder died
//! stops being renewed and drops out by itself when its own expiry passes (every script removes
//! the expired members first), however many live grants keep the key alive. A counter would keep
//! a dead holder's share for as long as anyone else renews.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

use crate::backend::redis::scripts::{self, Call, millis};

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
/// companion key of the type ARGV[3]: a reentrant lock's hash (`hash`), deleted when the last
/// grant leaves, or a semaphore's limit (`string`), which also expires with the set and is deleted
/// with its last member. A companion of another type (someone else's lock) is left alone.
/// ARGV: token, channel, companion type. The set then expires with its latest member, so members
/// of dead holders leave no key behind. Returns 1 when the member was still live, 0 otherwise.
const RELEASE: &str = r"
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local companion = KEYS[2] and redis.call('TYPE', KEYS[2])['ok'] == ARGV[3]
local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
if latest then
  local left = math.max(1, tonumber(latest) - now)
  redis.call('PEXPIRE', KEYS[1], left)
  if companion and ARGV[3] == 'string' then redis.call('PEXPIRE', KEYS[2], left) end
end
if companion and redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])
end
redis.call('PUBLISH', ARGV[2], '1')
if tonumber(s) > now then return 1 end
return 0
";

static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| scripts::with_prelude(EXTEND));
static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| scripts::with_prelude(RELEASE));

/// Extends `token`'s member of the set `keys[0]` (and keeps `keys[1..]` alive as long).
pub(crate) fn extend<'a>(keys: Vec<String>, token: &'a str, lease: Duration) -> Call<'a> {
    Call::new(&EXTEND_SCRIPT, keys, vec![token.to_owned(), millis(lease).to_string()])
}

/// Releases `token`'s member of the set `keys[0]` and publishes on `channel`. `keys[1]`, if given,
/// is a companion of the Redis type `companion` (`hash`: a reentrant lock's; `string`: a
/// semaphore's limit), deleted with the last member.
pub(crate) fn release<'a>(keys: Vec<String>, token: &'a str, channel: &'a str, companion: &'a str) -> Call<'a> {
    Call::new(&RELEASE_SCRIPT, keys, vec![token.to_owned(), channel.to_owned(), companion.to_owned()])
}
