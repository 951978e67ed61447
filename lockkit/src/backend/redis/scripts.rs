//! The Lua scripts of the plain lock, and [`Call`]: one script invocation (script, keys,
//! arguments) that any Redis backend can run, pipeline or undo. The primitives' scripts, beside
//! this file, hand [`Call`]s to the backends the same way.
//!
//! Each script is hashed once and run with `EVALSHA`; `NOSCRIPT` (after a Redis restart or
//! `SCRIPT FLUSH`) reloads it transparently. Every script touches only keys of one lock, which
//! share a hash tag, so they are cluster-safe.

use std::{sync::LazyLock, time::Duration};

use redis::{FromRedisValue, Script, aio::ConnectionLike};

use super::arg::Arg;
use crate::model::{
    fence::Fence,
    grant::Grant,
    keys::{LockKeys, suffix},
};

/// Lua: `ms_of(t)`, a `TIME` reply in milliseconds, and `server_ms()`, the server's clock in
/// milliseconds, never a client's. Every script that reads the time starts with it.
pub(crate) const SERVER_MS: &str = r"
local function ms_of(t) return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end
local function server_ms() return ms_of(redis.call('TIME')) end
";

/// Lua prelude (after [`SERVER_MS`]): `t`, the server's `TIME` when the script started (the fair
/// lock's arrivals take its microseconds), and `now`, the same in milliseconds; and
/// `keep(key, ms)`, which lengthens a key's expiry to at least `ms` from now (never shortens it).
pub(crate) const PRELUDE: &str = r"
local t = redis.call('TIME')
local now = ms_of(t)
local function keep(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then redis.call('PEXPIRE', key, ms) end
end
";

/// Lua: `announce_waiter(mark, held)`, run by a failed attempt that a release of the plain lock
/// (or of a read-write lock's write side) must wake: counts the attempt in the waiter mark,
/// because such a release publishes its wake-up only while the mark exists. Set in the same script
/// as the failed check, so a release that follows the attempt sees it. It outlives the waiter's
/// sleep, which is at most `held` (the holder's lease left) or, when the holder has no expiry
/// (`held` is -1, another library's key), the wake safety interval: then the mark lasts 10
/// minutes (a safety interval longer than that may cost such a waiter its interval). Its expiry
/// is only ever lengthened, so a later waiter's shorter view cannot cut an earlier one's. The
/// margin covers the time between the script and the start of the waiter's sleep; a waiter later
/// than that still wakes by its own timer. The mark always expires by itself: a release does not
/// delete it, because a release wakes one waiter per process and the others sleep on. (The count
/// is for tests and inspection: how many attempts announced themselves.)
pub(crate) const ANNOUNCE_WAITER: &str = r"
local function announce_waiter(mark, held)
  local ms = held >= 0 and held + 2000 or 600000
  if redis.call('INCR', mark) == 1 or redis.call('PTTL', mark) < ms then redis.call('PEXPIRE', mark, ms) end
end
";

/// Lua: `mark_lease_end(key, lease, delay)`, run with a lock-delay grant and each of its renewals:
/// the delay key holds the server's time (ms) at which the lease ends, and expires with the lock
/// key, `delay` after that. The lock key itself outlives the lease by the delay, so that every
/// `SET NX` fails until the delay is over: one of lockkit's first attempts (which reads no other
/// key), a waiter's script, or another library's lock on the same key. The delay key only tells
/// `inspect` where the lease ends and the delay begins.
const MARK_LEASE_END: &str = r"
local function mark_lease_end(key, lease, delay)
  redis.call('SET', key, server_ms() + lease, 'PX', lease + delay)
end
";

/// Grants the lock if free: `SET NX PX` of the owner token plus `INCR` of the fence counter; with
/// a lock-delay, the key's expiry is the lease plus the delay, and the delay key records where the
/// lease ends (`mark_lease_end`). KEYS: lock, fence, delay, waiter mark. ARGV: token, lease ms,
/// delay ms (0: none). Returns the fence (at least 1) when granted; when held (or delayed),
/// `-2 - pttl`, where pttl is the lease (or delay) left, -1 for a key without expiry. A refusal
/// announces the waiter.
///
/// The `SET NX` comes first because a lock is usually free when taken: one command both checks
/// and takes it, where a `PTTL` before it cost a command on every grant. A delay key without its
/// lock key (one about to expire with it, the same millisecond) still refuses the grant, undone in
/// the same script, so nobody ever sees it. One integer answers, not a `{granted, value}` table:
/// Redis 7.0 spends about a microsecond turning a Lua table into a reply.
const ACQUIRE: &str = r"
local held
local lease, delay = tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', lease + delay) then
  held = redis.call('PTTL', KEYS[3])
  if held <= 0 then
    if delay > 0 then mark_lease_end(KEYS[3], lease, delay) end
    return redis.call('INCR', KEYS[2])
  end
  redis.call('DEL', KEYS[1])
else
  held = redis.call('PTTL', KEYS[1])
end
announce_waiter(KEYS[4], held)
return -2 - held
";

/// Owner-checked compare-and-delete that wakes waiters, if any announced themselves (the waiter
/// mark): a `PUBLISH` nobody listens to is work for nothing. With a lock-delay grant it deletes
/// the holder's delay key too (a release has no delay), and for a leader its value: the key that
/// lives with the grant. KEYS: lock, waiter mark, and that key if any. ARGV: token. The channel is the lock key's name plus
/// `:released` (a channel is not a key, so it need not be declared, and one argument fewer is
/// one Lua string fewer to make per call).
/// Returns 1 when we still held the lock, 0 otherwise. (`pcall`: a key of another type, a
/// primitive's, is simply not ours.)
const RELEASE: &str = r"
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  if KEYS[3] then redis.call('DEL', KEYS[1], KEYS[3]) else redis.call('DEL', KEYS[1]) end
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PUBLISH', KEYS[1] .. ':released', '1') end
  return 1
end
return 0
";

/// Owner-checked `PEXPIRE`; with a lock-delay, to the lease plus the delay, and the delay key
/// moved to the new end of the lease (`mark_lease_end`). KEYS: lock, delay. ARGV: token, lease
/// ms, delay ms (0: none). Returns 1 when extended.
const EXTEND: &str = r"
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  local lease, delay = tonumber(ARGV[2]), tonumber(ARGV[3])
  if delay > 0 then mark_lease_end(KEYS[2], lease, delay) end
  return redis.call('PEXPIRE', KEYS[1], lease + delay)
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

static ACQUIRE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{SERVER_MS}{ANNOUNCE_WAITER}{MARK_LEASE_END}{ACQUIRE}")));
static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&format!("{SERVER_MS}{MARK_LEASE_END}{EXTEND}")));
static ENSURE_FENCE_AT_LEAST_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ENSURE_FENCE_AT_LEAST));

/// A script that uses the [`PRELUDE`]'s `now` and `keep`.
pub(crate) fn with_prelude(body: &str) -> Script {
    Script::new(&format!("{SERVER_MS}{PRELUDE}{body}"))
}

/// A script that uses the [`PRELUDE`] and [`ANNOUNCE_WAITER`].
pub(crate) fn with_prelude_announcing(body: &str) -> Script {
    Script::new(&format!("{SERVER_MS}{PRELUDE}{ANNOUNCE_WAITER}{body}"))
}

/// One script invocation: what a backend runs for an acquire, an extension, a release or a
/// primitive's own operation. All keys share one hash tag. Keys and arguments may borrow from
/// the lock's keys and the token they are for (see [`Arg`]).
#[derive(Debug, Clone)]
pub(crate) struct Call<'a> {
    script: &'static Script,
    keys: Vec<Arg<'a>>,
    args: Vec<Arg<'a>>,
}

impl<'a> Call<'a> {
    pub(crate) fn new<K, A>(
        script: &'static LazyLock<Script>,
        keys: impl IntoIterator<Item = K>,
        args: impl IntoIterator<Item = A>,
    ) -> Self
    where
        K: Into<Arg<'a>>,
        A: Into<Arg<'a>>,
    {
        let keys = keys.into_iter().map(Into::into).collect();
        let args = args.into_iter().map(Into::into).collect();
        Self { script: &**script, keys, args }
    }

    /// Runs the script (loading it first if the server lost it). The `EVALSHA` is built straight
    /// from the call: going through redis-rs' `ScriptInvocation` copied every key and argument
    /// twice per call, on the hot path of every acquire and release.
    pub(crate) async fn invoke<T: FromRedisValue>(&self, conn: &mut impl ConnectionLike) -> redis::RedisResult<T> {
        match self.evalsha().query_async(conn).await {
            Err(e) if is_noscript(&e) => {
                self.script.prepare_invoke().load_async(conn).await?;
                self.evalsha().query_async(conn).await
            }
            result => result,
        }
    }

    /// The same as a plain `EVALSHA` command, so that many can be pipelined. Its buffers are
    /// sized once (the hash is 40 bytes, the key count a few).
    fn evalsha(&self) -> redis::Cmd {
        let parts = self.keys.iter().chain(&self.args);
        let mut cmd = redis::Cmd::with_capacity(
            3 + self.keys.len() + self.args.len(),
            7 + 40 + 4 + parts.map(Arg::len).sum::<usize>(),
        );
        cmd.arg("EVALSHA").arg(self.script.get_hash()).arg(self.keys.len()).arg(&self.keys).arg(&self.args);
        cmd
    }
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

/// What an acquire script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Granted under this fence (for a plain lock: the node's counter after its increment).
    Granted(u64),
    /// Held by someone else, with this lease (or delay, or queue position's wait) left (`None`:
    /// no expiry).
    Held(Option<Duration>),
}

impl From<AcquireReply> for Grant {
    fn from(reply: AcquireReply) -> Self {
        match reply {
            AcquireReply::Granted(fence) => Self::Granted(Fence::new(fence)),
            AcquireReply::Held(ttl) => Self::Held(ttl),
        }
    }
}

/// Runs an acquire call. The plain lock's script answers one integer (see `ACQUIRE`); the
/// primitives' answer `{1, fence}` or `{0, pttl}`.
pub(crate) async fn acquire(conn: &mut impl ConnectionLike, call: &Call<'_>) -> redis::RedisResult<AcquireReply> {
    let reply: redis::Value = call.invoke(conn).await?;
    let (granted, value) = match reply {
        redis::Value::Int(fence) if fence > 0 => (true, fence),
        redis::Value::Int(held) => (false, -2 - held),
        other => redis::from_redis_value::<(i64, i64)>(other).map(|(granted, value)| (granted == 1, value))?,
    };
    Ok(if granted {
        AcquireReply::Granted(value.max(0) as u64)
    } else {
        AcquireReply::Held((value > 0).then(|| Duration::from_millis(value as u64)))
    })
}

/// Runs an owner-checked release or extension call: true when the token still held its grant.
pub(crate) async fn owner_checked(conn: &mut impl ConnectionLike, call: &Call<'_>) -> redis::RedisResult<bool> {
    Ok(call.invoke::<i64>(conn).await? == 1)
}

/// The plain lock's acquire: `delay` is the lock-delay (zero: none).
pub(crate) fn plain_acquire<'a>(keys: &'a LockKeys, token: &'a str, lease: Duration, delay: Duration) -> Call<'a> {
    let delay_ms = if delay.is_zero() { 0 } else { millis(delay) };
    Call::new(
        &ACQUIRE_SCRIPT,
        [Arg::from(&keys.lock), (&keys.fence).into(), Arg::side(keys, suffix::DELAY), waiter_mark(keys)],
        [Arg::from(token), millis(lease).to_string().into(), delay_ms.to_string().into()],
    )
}

/// The plain lock's (and a read-write lock's write side's) owner-checked release, which also ends
/// a lock-delay grant's delay.
pub(crate) fn plain_release<'a>(keys: &'a LockKeys, token: &'a str, delay: Duration) -> Call<'a> {
    release_with(keys, (!delay.is_zero()).then(|| Arg::side(keys, suffix::DELAY)), token)
}

/// The plain lock's owner-checked release that also deletes `side`, a key that lives with the
/// grant (a lock-delay grant's delay key, a leader's value).
pub(crate) fn release_with<'a>(keys: &'a LockKeys, side: Option<Arg<'a>>, token: &'a str) -> Call<'a> {
    Call::new(&RELEASE_SCRIPT, [Arg::from(&keys.lock), waiter_mark(keys)].into_iter().chain(side), [token])
}

/// The key whose presence says that a waiter may sleep until the plain lock is released.
pub(crate) fn waiter_mark(keys: &LockKeys) -> Arg<'_> {
    Arg::side(keys, suffix::WAITING)
}

/// The plain lock's owner-checked extension.
pub(crate) fn plain_extend<'a>(keys: &'a LockKeys, token: &'a str, lease: Duration, delay: Duration) -> Call<'a> {
    let delay_ms = if delay.is_zero() { 0 } else { millis(delay) };
    Call::new(
        &EXTEND_SCRIPT,
        [Arg::from(&keys.lock), Arg::side(keys, suffix::DELAY)],
        [Arg::from(token), millis(lease).to_string().into(), delay_ms.to_string().into()],
    )
}

/// Raises the fence counter to at least `at_least`; returns its value afterwards.
pub(crate) async fn raise_fence(
    conn: &mut impl ConnectionLike,
    keys: &LockKeys,
    at_least: u64,
) -> redis::RedisResult<u64> {
    let call = Call::new(&ENSURE_FENCE_AT_LEAST_SCRIPT, vec![keys.fence.clone()], vec![at_least.to_string()]);
    let value: String = call.invoke(conn).await?;
    value
        .parse()
        .map_err(|_| redis::RedisError::from((redis::ErrorKind::Parse, "the fence counter is not a number", value)))
}

/// Runs many owner-checked extensions on one connection in a single pipelined round trip
/// (loading their scripts first if the server lost them). One reply per call, true where the
/// grant was still ours.
pub(crate) async fn extend_pipelined(
    conn: &mut impl ConnectionLike,
    calls: &[Call<'_>],
) -> redis::RedisResult<Vec<bool>> {
    let mut pipe = redis::pipe();
    for call in calls {
        pipe.add_command(call.evalsha());
    }
    let replies: Vec<i64> = match pipe.query_async(conn).await {
        Err(e) if is_noscript(&e) => {
            let mut loaded = Vec::new();
            for call in calls {
                let hash = call.script.get_hash();
                if !loaded.contains(&hash) {
                    call.script.prepare_invoke().load_async(conn).await?;
                    loaded.push(hash);
                }
            }
            pipe.query_async(conn).await?
        }
        result => result?,
    };
    Ok(replies.into_iter().map(|reply| reply == 1).collect())
}
