//! The Lua scripts of the plain lock, and [`Call`]: one script invocation (script, keys,
//! arguments) that any Redis backend can run, pipeline or undo. The primitives' scripts, beside
//! this file, hand [`Call`]s to the backends the same way.
//!
//! Each script is hashed once and run with `EVALSHA`; `NOSCRIPT` (after a Redis restart or
//! `SCRIPT FLUSH`) reloads it transparently. Every script touches only keys of one lock, which
//! share a hash tag, so they are cluster-safe.

use std::{sync::LazyLock, time::Duration};

use redis::{FromRedisValue, Script, aio::ConnectionLike};

use crate::model::{fence::Fence, grant::Grant, keys::LockKeys};

/// Lua prelude: `now`, the server's clock in milliseconds (`TIME`), never a client's; and
/// `keep(key, ms)`, which lengthens a key's expiry to at least `ms` from now (never shortens it).
pub(crate) const PRELUDE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function keep(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then redis.call('PEXPIRE', key, ms) end
end
";

/// Grants the lock if free and not in a lock-delay: `SET PX` of the owner token plus `INCR` of
/// the fence counter; with a delay, the delay key (holder's token) is set to outlive the lease
/// by the delay. KEYS: lock, fence, delay. ARGV: token, lease ms, delay ms (0: none).
/// Returns `{1, fence}` when granted, `{0, pttl}` when held (pttl is -1 for a key without expiry)
/// or delayed (the delay left).
const ACQUIRE: &str = r"
local held = redis.call('PTTL', KEYS[1])
if held ~= -2 then return {0, held} end
local delayed = redis.call('PTTL', KEYS[3])
if delayed > 0 then return {0, delayed} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', tonumber(ARGV[2]) + tonumber(ARGV[3]))
end
return {1, redis.call('INCR', KEYS[2])}
";

/// Owner-checked compare-and-delete that wakes waiters; deletes the key that lives with the
/// grant too (the holder's delay key: a release has no delay; a leader's value). KEYS: lock,
/// delay or leader. ARGV: token, channel.
/// Returns 1 when we still held the lock, 0 otherwise. (`pcall`: a key of another type, a
/// primitive's, is simply not ours.)
const RELEASE: &str = r"
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
";

/// Owner-checked `PEXPIRE`, keeping a delay key `delay` past the lease. KEYS: lock, delay.
/// ARGV: token, lease ms, delay ms (0: none). Returns 1 when extended.
const EXTEND: &str = r"
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  if tonumber(ARGV[3]) > 0 then
    redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[2]) + tonumber(ARGV[3]))
  end
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

static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE));
static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
static EXTEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND));
static ENSURE_FENCE_AT_LEAST_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ENSURE_FENCE_AT_LEAST));

/// A script that uses the [`PRELUDE`]'s `now` and `keep`.
pub(crate) fn with_prelude(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}{body}"))
}

/// One script invocation: what a backend runs for an acquire, an extension, a release or a
/// primitive's own operation. All keys share one hash tag.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    script: &'static Script,
    keys: Vec<String>,
    args: Vec<String>,
}

impl Call {
    pub(crate) fn new(script: &'static LazyLock<Script>, keys: Vec<String>, args: Vec<String>) -> Self {
        Self { script: &**script, keys, args }
    }

    /// Runs the script (loading it first if the server lost it).
    pub(crate) async fn invoke<T: FromRedisValue>(&self, conn: &mut impl ConnectionLike) -> redis::RedisResult<T> {
        let mut invocation = self.script.prepare_invoke();
        for key in &self.keys {
            invocation.key(key);
        }
        for arg in &self.args {
            invocation.arg(arg);
        }
        invocation.invoke_async(conn).await
    }

    /// The same as a plain `EVALSHA` command, so that many can be pipelined.
    fn evalsha(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.get_hash()).arg(self.keys.len()).arg(&self.keys).arg(&self.args);
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

/// Runs an acquire call: every acquire script answers `{1, fence}` or `{0, pttl}`.
pub(crate) async fn acquire(conn: &mut impl ConnectionLike, call: &Call) -> redis::RedisResult<AcquireReply> {
    let (granted, value): (i64, i64) = call.invoke(conn).await?;
    Ok(if granted == 1 {
        AcquireReply::Granted(value.max(0) as u64)
    } else {
        AcquireReply::Held((value > 0).then(|| Duration::from_millis(value as u64)))
    })
}

/// Runs an owner-checked release or extension call: true when the token still held its grant.
pub(crate) async fn owner_checked(conn: &mut impl ConnectionLike, call: &Call) -> redis::RedisResult<bool> {
    Ok(call.invoke::<i64>(conn).await? == 1)
}

/// The plain lock's acquire: `delay` is the lock-delay (zero: none).
pub(crate) fn plain_acquire(keys: &LockKeys, token: &str, lease: Duration, delay: Duration) -> Call {
    let delay_ms = if delay.is_zero() { 0 } else { millis(delay) };
    Call::new(
        &ACQUIRE_SCRIPT,
        vec![keys.lock.clone(), keys.fence.clone(), keys.key(crate::model::keys::suffix::DELAY)],
        vec![token.to_owned(), millis(lease).to_string(), delay_ms.to_string()],
    )
}

/// The plain lock's owner-checked release (which also ends a lock-delay of ours).
pub(crate) fn plain_release(keys: &LockKeys, token: &str) -> Call {
    release_with(keys, keys.key(crate::model::keys::suffix::DELAY), token)
}

/// The plain lock's owner-checked release that deletes `side`, a key that lives with the grant,
/// along with the lock.
pub(crate) fn release_with(keys: &LockKeys, side: String, token: &str) -> Call {
    Call::new(&RELEASE_SCRIPT, vec![keys.lock.clone(), side], vec![token.to_owned(), keys.released.clone()])
}

/// The plain lock's owner-checked extension.
pub(crate) fn plain_extend(keys: &LockKeys, token: &str, lease: Duration, delay: Duration) -> Call {
    let delay_ms = if delay.is_zero() { 0 } else { millis(delay) };
    Call::new(
        &EXTEND_SCRIPT,
        vec![keys.lock.clone(), keys.key(crate::model::keys::suffix::DELAY)],
        vec![token.to_owned(), millis(lease).to_string(), delay_ms.to_string()],
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
pub(crate) async fn extend_pipelined(conn: &mut impl ConnectionLike, calls: &[Call]) -> redis::RedisResult<Vec<bool>> {
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
