//! The fair lock: first come, first served. Waiters queue on the server in the order they first
//! tried (`{prefix:name}:queue`, scored by arrival on the server's clock in µs), and only the head
//! of the queue can take a free lock, so nobody barges in, not even a releaser that comes straight
//! back. A release wakes the head alone, on its own channel (`{prefix:name}:wake:TICKET`).
//!
//! What the Redisson fair lock got wrong, and how this one avoids it:
//! - Waiter timeouts are server time (`{prefix:name}:queue-deadlines`, `TIME` in the script):
//!   every attempt of a waiter moves its deadline to `queue_timeout` from now, and every attempt
//!   of anyone drops the waiters whose deadline passed, so a waiter that died cannot block the
//!   queue for longer than its timeout: the others retry when the head's deadline passes.
//! - A waiter that gives up (its wait ran out, or its acquire was dropped) leaves the queue at
//!   once, and wakes the next head if it was the head.
//! - No key is left behind: Redis deletes a sorted set with its last member, and both queue keys
//!   expire with the latest deadline in them if every waiter vanished.
//!
//! Only fair acquires are fair: a plain `acquire` of the same name does not queue and may barge.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

use super::scripts::{self, Call, millis};
use crate::model::keys::{LockKeys, suffix};

/// One attempt of the waiter `ticket`: joins the queue (or keeps its place), and takes the lock
/// if it is free and `ticket` is the head. KEYS: lock, fence, queue, deadlines. ARGV: token,
/// lease ms, ticket, queue timeout ms. Returns `{1, fence}` or `{0, ms until worth retrying}`: the
/// holder's lease end, the head's deadline, or a third of our own timeout, whichever is first.
const ACQUIRE: &str = r"
local timeout = tonumber(ARGV[4])
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do
  redis.call('ZREM', KEYS[3], gone)
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
if not redis.call('ZSCORE', KEYS[3], ARGV[3]) then
  redis.call('ZADD', KEYS[3], t[1] .. string.sub('000000' .. t[2], -6), ARGV[3])
end
local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
local held = redis.call('PTTL', KEYS[1])
if held == -2 and head == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('ZREM', KEYS[3], ARGV[3])
  redis.call('ZREM', KEYS[4], ARGV[3])
  return {1, redis.call('INCR', KEYS[2])}
end
redis.call('ZADD', KEYS[4], now + timeout, ARGV[3])
keep(KEYS[3], timeout)
keep(KEYS[4], timeout)
local wait = math.floor(timeout / 3)
if held > 0 then wait = math.min(wait, held) end
if head ~= ARGV[3] then
  local deadline = redis.call('ZSCORE', KEYS[4], head)
  if deadline then wait = math.min(wait, tonumber(deadline) - now + 1) end
end
return {0, math.max(wait, 1)}
";

/// Owner-checked release that wakes the head of the queue. KEYS: lock, queue. ARGV: token,
/// wake channel prefix. Returns 1 when we still held the lock.
const RELEASE: &str = r"
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if head then redis.call('PUBLISH', ARGV[2] .. head, '1') end
return 1
";

/// A waiter gives up its place; if it was the head of a free lock, the next head is woken.
/// KEYS: lock, queue, deadlines. ARGV: ticket, wake channel prefix.
const LEAVE: &str = r"
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if head == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  local next = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if next then redis.call('PUBLISH', ARGV[2] .. next, '1') end
end
return 1
";

static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| scripts::with_prelude(ACQUIRE));
static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
static LEAVE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(LEAVE));

pub(crate) fn acquire<'a>(
    keys: &'a LockKeys,
    token: &'a str,
    lease: Duration,
    ticket: &'a str,
    queue_timeout: Duration,
) -> Call<'a> {
    Call::new(
        &ACQUIRE_SCRIPT,
        vec![keys.lock.clone(), keys.fence.clone(), keys.key(suffix::QUEUE), keys.key(suffix::QUEUE_DEADLINES)],
        vec![token.to_owned(), millis(lease).to_string(), ticket.to_owned(), millis(queue_timeout).to_string()],
    )
}

pub(crate) fn release<'a>(keys: &'a LockKeys, token: &'a str) -> Call<'a> {
    Call::new(
        &RELEASE_SCRIPT,
        vec![keys.lock.clone(), keys.key(suffix::QUEUE)],
        vec![token.to_owned(), keys.fair_wake_prefix()],
    )
}

pub(crate) fn leave<'a>(keys: &'a LockKeys, ticket: &'a str) -> Call<'a> {
    Call::new(
        &LEAVE_SCRIPT,
        vec![keys.lock.clone(), keys.key(suffix::QUEUE), keys.key(suffix::QUEUE_DEADLINES)],
        vec![ticket.to_owned(), keys.fair_wake_prefix()],
    )
}
