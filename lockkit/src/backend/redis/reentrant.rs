//! The reentrant lock: held by an explicit owner id (async tasks have no thread identity), which
//! may take it again while it holds it; free when the last of its grants is released.
//!
//! Keys (one hash tag): `{prefix:name}` is a hash `{owner, fence}`, so a plain lock of the same
//! name sees it held; `{prefix:name}:grants` has one member per grant, its random token scored by
//! its expiry (server ms). Each grant is a lease of its own, with its own random token, renewed
//! by the watchdog and released by its guard; all of them share the fence of the first grant.
//! The count of a holder is the number of its live grants: a grant whose task died drops out at
//! its own expiry instead of pinning the count.
//!
//! The owner id says *who may re-enter*, the token says *which grant* a release or renewal is
//! for: an owner id comes from the caller and is guessable, so it never authorises a release.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

use super::members;
use super::{
    arg::Arg,
    scripts::{self, Call, millis},
};
use crate::model::keys::{LockKeys, suffix};

/// Grants the lock to `owner` if it is free or already `owner`'s. KEYS: lock, fence, grants,
/// waiter mark. ARGV: token, lease ms, owner. Returns `{1, fence}` (the first grant's fence for a
/// re-entry) or `{0, pttl}`; a refusal announces the waiter (a plain lock's release wakes it
/// only then).
const ACQUIRE: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' and redis.call('ZCARD', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1])
  kind = 'none'
end
local fence
if kind == 'none' then
  fence = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'owner', ARGV[3], 'fence', fence)
elseif kind == 'hash' and redis.call('HGET', KEYS[1], 'owner') == ARGV[3] then
  fence = tonumber(redis.call('HGET', KEYS[1], 'fence'))
else
  local held = redis.call('PTTL', KEYS[1])
  announce_waiter(KEYS[4], held)
  return {0, held}
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
keep(KEYS[1], ARGV[2])
keep(KEYS[3], ARGV[2])
return {1, fence}
";

static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| scripts::with_prelude_announcing(ACQUIRE));

pub(crate) fn acquire<'a>(keys: &'a LockKeys, token: &'a str, lease: Duration, owner: &'a str) -> Call<'a> {
    Call::new(
        &ACQUIRE_SCRIPT,
        [Arg::from(&keys.lock), (&keys.fence).into(), Arg::side(keys, suffix::GRANTS), scripts::waiter_mark(keys)],
        vec![token.to_owned(), millis(lease).to_string(), owner.to_owned()],
    )
}

pub(crate) fn extend<'a>(keys: &'a LockKeys, token: &'a str, lease: Duration) -> Call<'a> {
    members::extend(vec![keys.key(suffix::GRANTS), keys.lock.clone()], token, lease)
}

pub(crate) fn release<'a>(keys: &'a LockKeys, token: &'a str) -> Call<'a> {
    members::release(vec![keys.key(suffix::GRANTS), keys.lock.clone()], token, &keys.released, "hash")
}
