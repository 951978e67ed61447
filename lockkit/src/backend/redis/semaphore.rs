//! The semaphore with expirable permits: at most `permits` holders at once, each permit a lease of
//! its own with its own fence. A dead client's permits come back when their lease ends, timed by
//! the server: each permit is a member of `{prefix:name}:permits` scored by its expiry (server
//! ms), and every acquire drops the expired ones first. `{prefix:name}:limit` records the permit
//! count of the latest grant, for [`LockClient::inspect`]; it expires with the permits.
//!
//! The permit count is given by every caller (`client.semaphore(name, permits)`): callers of one
//! name must agree on it. A caller that asks for fewer permits is refused while the set holds as
//! many; one that asks for more can add to it.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

use super::members;
use super::scripts::{self, Call, millis};
use crate::model::keys::{LockKeys, suffix};

/// Grants a permit if fewer than `limit` are live, and records `limit` (for inspection) with the
/// permits' expiry. KEYS: permits, fence, limit. ARGV: token, lease ms, limit. Returns
/// `{1, fence}` (each permit its own) or `{0, ms until the earliest expiry}`.
const ACQUIRE: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  keep(KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], ARGV[3], 'PX', redis.call('PTTL', KEYS[1]))
  return {1, redis.call('INCR', KEYS[2])}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tonumber(first[2]) - now}
";

static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| scripts::with_prelude(ACQUIRE));

pub(crate) fn acquire<'a>(keys: &'a LockKeys, token: &'a str, lease: Duration, permits: u32) -> Call<'a> {
    Call::new(
        &ACQUIRE_SCRIPT,
        vec![keys.key(suffix::PERMITS), keys.fence.clone(), keys.key(suffix::LIMIT)],
        vec![token.to_owned(), millis(lease).to_string(), permits.to_string()],
    )
}

pub(crate) fn extend<'a>(keys: &'a LockKeys, token: &'a str, lease: Duration) -> Call<'a> {
    members::extend(vec![keys.key(suffix::PERMITS), keys.key(suffix::LIMIT)], token, lease)
}

pub(crate) fn release<'a>(keys: &'a LockKeys, token: &'a str) -> Call<'a> {
    members::release(vec![keys.key(suffix::PERMITS), keys.key(suffix::LIMIT)], token, &keys.released, "string")
}
