//! A Redis server's view of one lock, read by one small read-only script per name on the server
//! of the name's hash tag and timed by that server's clock. Tokens are secrets (whoever knows one
//! can release or renew its grant), so the script never returns them: a grant or a waiter is shown
//! by the first 8 hex digits of its token's SHA-1.

use std::{collections::BTreeSet, sync::LazyLock, time::Duration};

use redis::{
    AsyncCommands, Script, Value,
    aio::{ConnectionLike, MultiplexedConnection},
};

use super::scripts::SERVER_MS;
use crate::model::{
    fence::Fence,
    keys::{LockKeys, suffix},
    lock_info::{Holder, HolderRole, LockInfo, LockKind, Waiter},
};

/// Reads every key of a name without writing any. KEYS: lock, fence, delay, grants, readers,
/// writer-waiting, permits, limit, queue, queue-deadlines. Returns `{lock type, lock pttl, holder
/// id or false, owner or false, fence or false, delay pttl, grants, readers, writer-waiting pttl,
/// permits, limit or false, queue}`; each of grants, readers, permits and queue is a flat list of
/// `id, ms left` over live members (the queue in order, with each waiter's deadline).
///
/// A lock-delay grant's key outlives its lease by the delay, and its delay key holds the server's
/// time at which the lease ends (see the plain lock's scripts): until then the lock is held, for
/// the lease left; after it, what is left is the delay alone (the lock reads as absent).
const READ: &str = r"
local now = server_ms()
local function short(token) return string.sub(redis.sha1hex(token), 1, 8) end
local function kind(key) return redis.call('TYPE', key)['ok'] end
local function members(key)
  local out = {}
  if kind(key) ~= 'zset' then return out end
  local m = redis.call('ZRANGEBYSCORE', key, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #m, 2 do
    out[#out + 1] = short(m[i])
    out[#out + 1] = tonumber(m[i + 1]) - now
  end
  return out
end
local lock, pttl = kind(KEYS[1]), redis.call('PTTL', KEYS[1])
local lease_end = kind(KEYS[3]) == 'string' and tonumber(redis.call('GET', KEYS[3]))
if lease_end and lock == 'string' then
  if lease_end > now then pttl = lease_end - now else lock, pttl = 'none', -2 end
end
local holder, owner = false, false
if lock == 'string' then holder = short(redis.call('GET', KEYS[1]))
elseif lock == 'hash' then owner = redis.call('HGET', KEYS[1], 'owner') end
local fence = false
if kind(KEYS[2]) == 'string' then fence = redis.call('GET', KEYS[2]) end
local limit = false
if kind(KEYS[8]) == 'string' then limit = redis.call('GET', KEYS[8]) end
local queue = {}
if kind(KEYS[9]) == 'zset' and kind(KEYS[10]) == 'zset' then
  for _, ticket in ipairs(redis.call('ZRANGE', KEYS[9], 0, -1)) do
    local d = redis.call('ZSCORE', KEYS[10], ticket)
    if d and tonumber(d) > now then
      queue[#queue + 1] = short(ticket)
      queue[#queue + 1] = tonumber(d) - now
    end
  end
end
return {lock, pttl, holder, owner, fence, redis.call('PTTL', KEYS[3]),
  members(KEYS[4]), members(KEYS[5]), redis.call('PTTL', KEYS[6]), members(KEYS[7]), limit, queue}
";

static READ_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&format!("{SERVER_MS}{READ}")));

/// One server's view of one lock, as read by [`read_view`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodeView {
    /// The Redis type of the lock key (`none` when it does not exist).
    pub(crate) lock_type: String,
    pub(crate) ttl: Option<Duration>,
    /// The lock key's holder id, when it is a string.
    pub(crate) holder: Option<String>,
    pub(crate) owner: Option<String>,
    pub(crate) fence: Option<u64>,
    pub(crate) delay: Option<Duration>,
    pub(crate) grants: Vec<(String, Duration)>,
    pub(crate) readers: Vec<(String, Duration)>,
    pub(crate) writer_waiting: Option<Duration>,
    pub(crate) permits: Vec<(String, Duration)>,
    pub(crate) limit: Option<u32>,
    pub(crate) queue: Vec<(String, Duration)>,
}

impl NodeView {
    pub(crate) fn exists(&self) -> bool {
        self.lock_type != "none"
    }

    /// Whether any key of a primitive (other than the plain lock and its delay) is there.
    pub(crate) fn has_primitive(&self) -> bool {
        !matches!(self.lock_type.as_str(), "none" | "string")
            || !self.grants.is_empty()
            || !self.readers.is_empty()
            || self.writer_waiting.is_some()
            || !self.permits.is_empty()
            || !self.queue.is_empty()
    }

    /// What the keys reveal.
    pub(crate) fn kind(&self) -> LockKind {
        if !self.queue.is_empty() {
            LockKind::Fair
        } else if !self.permits.is_empty() {
            LockKind::Semaphore
        } else if self.lock_type == "hash" || !self.grants.is_empty() {
            LockKind::Reentrant
        } else if !self.readers.is_empty() || self.writer_waiting.is_some() {
            LockKind::ReadWrite
        } else if self.lock_type == "string" || self.delay.is_some() {
            LockKind::Plain
        } else if self.exists() {
            LockKind::Unsupported
        } else {
            LockKind::Idle
        }
    }

    /// The whole view of one server (one Redis, or the cluster master of the name's slot).
    pub(crate) fn into_info(self, name: String) -> LockInfo {
        let kind = self.kind();
        let mut holders = Vec::new();
        if let Some(id) = self.holder.clone() {
            let role = if kind == LockKind::ReadWrite { HolderRole::Writer } else { HolderRole::Lock };
            holders.push(Holder { role, id, ttl: self.ttl });
        }
        let members =
            [(HolderRole::Grant, self.grants), (HolderRole::Reader, self.readers), (HolderRole::Permit, self.permits)];
        for (role, set) in members {
            holders.extend(set.into_iter().map(|(id, left)| Holder { role, id, ttl: Some(left) }));
        }
        LockInfo {
            name,
            held: self.lock_type != "none",
            ttl: self.ttl,
            fence: self.fence.map(Fence::new),
            kind,
            holders,
            owner: self.owner,
            permits: self.limit,
            queue: self.queue.into_iter().map(|(id, deadline)| Waiter { id, deadline }).collect(),
            writer_waiting: self.writer_waiting,
            delay: self.delay,
        }
    }
}

/// The names of the locks under `prefix` matching `pattern` that have a key on this server.
pub(crate) async fn scan_names(
    conn: &mut MultiplexedConnection,
    prefix: &str,
    pattern: &str,
) -> redis::RedisResult<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    let mut keys = conn.scan_match::<_, String>(format!("{{{prefix}:{pattern}}}*")).await?;
    while let Some(key) = keys.next_item().await {
        let key = key?;
        if let Some(name) = LockKeys::name_of(prefix, &key) {
            names.insert(name.to_owned());
        }
    }
    Ok(names)
}

/// This server's view of one lock: one read-only script on the server of the name's hash tag.
pub(crate) async fn read_view(conn: &mut impl ConnectionLike, keys: &LockKeys) -> redis::RedisResult<NodeView> {
    let mut invocation = READ_SCRIPT.key(&keys.lock);
    for key in [
        keys.fence.clone(),
        keys.key(suffix::DELAY),
        keys.key(suffix::GRANTS),
        keys.key(suffix::READERS),
        keys.key(suffix::WRITER_WAITING),
        keys.key(suffix::PERMITS),
        keys.key(suffix::LIMIT),
        keys.key(suffix::QUEUE),
        keys.key(suffix::QUEUE_DEADLINES),
    ] {
        invocation.key(key);
    }
    let reply: Vec<Value> = invocation.invoke_async(conn).await?;
    parse_view(reply)
}

fn parse_view(reply: Vec<Value>) -> redis::RedisResult<NodeView> {
    let bad = || redis::RedisError::from((redis::ErrorKind::Parse, "unexpected inspection reply"));
    let [lock_type, pttl, holder, owner, fence, delay, grants, readers, waiting, permits, limit, queue]: [Value; 12] =
        reply.try_into().map_err(|_| bad())?;
    let fence: Option<String> = redis::from_redis_value(fence)?;
    let limit: Option<String> = redis::from_redis_value(limit)?;
    Ok(NodeView {
        lock_type: redis::from_redis_value(lock_type)?,
        ttl: positive(redis::from_redis_value(pttl)?),
        holder: redis::from_redis_value(holder)?,
        owner: redis::from_redis_value(owner)?,
        fence: fence.map(|f| f.parse().map_err(|_| bad())).transpose()?,
        delay: positive(redis::from_redis_value(delay)?),
        grants: pairs(grants)?,
        readers: pairs(readers)?,
        writer_waiting: positive(redis::from_redis_value(waiting)?),
        permits: pairs(permits)?,
        limit: limit.and_then(|l| l.parse().ok()),
        queue: pairs(queue)?,
    })
}

/// A `PTTL` or a time left in ms as a duration, if positive.
fn positive(ms: i64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms as u64))
}

/// A flat `id, ms left, ...` list.
fn pairs(value: Value) -> redis::RedisResult<Vec<(String, Duration)>> {
    let flat: Vec<Value> = redis::from_redis_value(value)?;
    flat.chunks_exact(2)
        .map(|pair| {
            let id: String = redis::from_redis_value(pair[0].clone())?;
            let left: i64 = redis::from_redis_value(pair[1].clone())?;
            Ok((id, Duration::from_millis(left.max(0) as u64)))
        })
        .collect()
}
