//! A leader's lock on Redis (one server, a cluster, each Redlock node): the plain lock
//! `{prefix:NAME}` and, beside it, `{prefix:NAME}:leader`, a hash of the leader's token and
//! value. Both are set by the grant, extended together and deleted together, so the value lives
//! exactly as long as the lease: a follower never reads the value of a leader whose lease ended.
//! The election itself (campaign, observe, resign) is `election`'s; this file only has the scripts.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

use super::{
    arg::Arg,
    scripts::{self, Call, millis},
};
use crate::model::{
    fence::Fence,
    keys::{LockKeys, suffix},
    leader::Leader,
};

/// Grants the lock if free, with the leader's value beside it. KEYS: lock, fence, leader, waiter
/// mark. ARGV: token, lease ms, value. Returns `{1, fence}` or `{0, pttl}`; a candidate kept out
/// announces itself, so that the leader's release wakes it.
const ACQUIRE: &str = r"
local held = redis.call('PTTL', KEYS[1])
if held ~= -2 then
  announce_waiter(KEYS[4], held)
  return {0, held}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'token', ARGV[1], 'value', ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return {1, redis.call('INCR', KEYS[2])}
";

/// Owner-checked `PEXPIRE` of the lock and its value. KEYS: lock, leader. ARGV: token, lease ms.
const EXTEND: &str = r"
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// The leader as followers see it: its value and the fence counter, only while the value beside
/// the lock is the holder's (a plain lock on the same name has no leader). KEYS: lock, leader,
/// fence. Returns `{value, fence}` or nil.
const READ: &str = r"
local holder = redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' then return false end
local leader = redis.pcall('HMGET', KEYS[2], 'token', 'value')
if type(leader) ~= 'table' or leader[1] ~= holder then return false end
return {leader[2], redis.call('GET', KEYS[3]) or '0'}
";

static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| scripts::with_prelude_announcing(ACQUIRE));
static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND));
static READ_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(READ));

pub(crate) fn acquire<'a>(keys: &'a LockKeys, token: &'a str, lease: Duration, value: &'a str) -> Call<'a> {
    Call::new(
        &ACQUIRE_SCRIPT,
        [Arg::from(&keys.lock), (&keys.fence).into(), Arg::side(keys, suffix::LEADER), scripts::waiter_mark(keys)],
        vec![token.to_owned(), millis(lease).to_string(), value.to_owned()],
    )
}

pub(crate) fn extend<'a>(keys: &'a LockKeys, token: &'a str, lease: Duration) -> Call<'a> {
    Call::new(
        &EXTEND_SCRIPT,
        vec![keys.lock.clone(), keys.key(suffix::LEADER)],
        vec![token.to_owned(), millis(lease).to_string()],
    )
}

/// The plain lock's release, which deletes the value with the lock.
pub(crate) fn release<'a>(keys: &'a LockKeys, token: &'a str) -> Call<'a> {
    scripts::release_with(keys, Some(Arg::side(keys, suffix::LEADER)), token)
}

/// Reads the leader (see [`READ`]); parse its answer with [`parse_read`].
pub(crate) fn read<'a>(keys: &'a LockKeys) -> Call<'a> {
    Call::new(&READ_SCRIPT, vec![keys.lock.clone(), keys.key(suffix::LEADER), keys.fence.clone()], Vec::<String>::new())
}

/// The answer of [`read`]: the leader (its value, and the fence counter as its term), if any.
pub(crate) fn parse_read(reply: redis::Value) -> crate::Result<Option<Leader>> {
    let read: Option<(String, String)> = redis::from_redis_value(reply)?;
    Ok(read.map(|(value, fence)| Leader::new(value, Fence::new(fence.parse().unwrap_or(0)))))
}
