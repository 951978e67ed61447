//! Read-only views of locks for operators: who holds what, for how long, at which fence, and for
//! the primitives their holders, queue, permits and lock-delay. Each backend gathers them
//! ([`Backend::inspect`](crate::backend::Backend)) from the per-server views read here: one small
//! read-only script per name, on the server of the name's hash tag, timed by that server's clock.
//!
//! Tokens are secrets (whoever knows one can release or renew its grant), so the script never
//! returns them: a grant or a waiter is shown by the first 8 hex digits of its token's SHA-1.

use std::{collections::BTreeSet, sync::LazyLock, time::Duration};

use redis::{
    AsyncCommands, Script, Value,
    aio::{ConnectionLike, MultiplexedConnection},
};

use crate::{
    Fence, LockClient,
    error::Result,
    keys::{LockKeys, suffix},
};

/// The state of one lock as its servers see it right now. Every time left is measured by the
/// server's clock (`PTTL`, or a sorted-set score against the server's `TIME`), never the client's.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name (without prefix).
    pub name: String,
    /// Whether the lock key `{prefix:name}` exists (by lockkit or any client using the same key):
    /// a plain lock, a fair lock's or a reentrant lock's holder, a read-write lock's writer. A
    /// semaphore's permits and a read-write lock's readers do not use it: see
    /// [`holders`](Self::holders). On Redlock: on a majority of the nodes.
    pub held: bool,
    /// Lease left of the lock key, if held with an expiry (on Redlock: the shortest among the
    /// holding nodes).
    pub ttl: Option<Duration>,
    /// The fence counter: the fence of the latest grant (on Redlock: the largest on any node).
    /// `None` if never granted (or Redis lost it).
    pub fence: Option<Fence>,
    /// Which primitive the name's keys reveal.
    pub kind: LockKind,
    /// The grants in force, each with the time left to it: the lock key's holder, a reentrant
    /// lock's grants, a read-write lock's readers, a semaphore's permits. Expired grants that no
    /// script has dropped yet are left out.
    pub holders: Vec<Holder>,
    /// A reentrant lock's owner id (given by the caller; not a secret).
    pub owner: Option<String>,
    /// A semaphore's permit count, as given by the caller of the latest permit (`None`: unknown,
    /// or not a semaphore). [`holders`](Self::holders) has the permits out.
    pub permits: Option<u32>,
    /// A fair lock's queue, head first; waiters whose deadline passed are left out.
    pub queue: Vec<Waiter>,
    /// A read-write lock: how long a waiting writer keeps new readers out, if one waits.
    pub writer_waiting: Option<Duration>,
    /// Time until the lock-delay ends, if a delay key exists. While the holder's lease runs this
    /// is its lease left plus the delay; once the lease ended without a release, it is the time
    /// for which the lock still cannot be taken. (On Redlock: until a majority of the nodes are
    /// out of their delay.)
    pub delay: Option<Duration>,
}

/// Which primitive a name's keys reveal (a name belongs to one primitive at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// Nothing holds, waits for or delays the name: at most its fence counter is left.
    Idle,
    /// A plain lock (or a lock-delay left by one). A fair lock's holder with nobody queued and a
    /// read-write lock's writer with no reader nor waiting writer look the same.
    Plain,
    /// A reentrant lock: a hash `{owner, fence}` and its grants.
    Reentrant,
    /// A read-write lock: readers, or a writer that waits.
    ReadWrite,
    /// A semaphore: its permits.
    Semaphore,
    /// A fair lock: its queue of waiters (and maybe a holder).
    Fair,
    /// Keys lockkit does not read: a lock key of another Redis type than lockkit's, or, on
    /// Redlock, the keys of a primitive (Redlock keeps only the plain lock).
    Unsupported,
}

impl LockKind {
    /// The kind's name: `idle`, `plain`, `reentrant`, `read-write`, `semaphore`, `fair`,
    /// `unsupported`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Plain => "plain",
            Self::Reentrant => "reentrant",
            Self::ReadWrite => "read-write",
            Self::Semaphore => "semaphore",
            Self::Fair => "fair",
            Self::Unsupported => "unsupported",
        }
    }
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a [`Holder`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HolderRole {
    /// The lock key of a plain or fair lock (or of a client that is not lockkit).
    Lock,
    /// The write side of a read-write lock.
    Writer,
    /// A read share of a read-write lock.
    Reader,
    /// One grant of a reentrant lock's owner.
    Grant,
    /// One permit of a semaphore.
    Permit,
}

impl HolderRole {
    /// The role's name: `lock`, `writer`, `reader`, `grant`, `permit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Writer => "writer",
            Self::Reader => "reader",
            Self::Grant => "grant",
            Self::Permit => "permit",
        }
    }
}

/// One grant in force.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// What it holds.
    pub role: HolderRole,
    /// The first 8 hex digits of the SHA-1 of its token: tells grants apart without revealing
    /// the token (which would let anyone release the grant).
    pub id: String,
    /// Time left to its lease (`None`: the key has no expiry).
    pub ttl: Option<Duration>,
}

/// One waiter of a fair lock's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The first 8 hex digits of the SHA-1 of its ticket.
    pub id: String,
    /// Time left until the server drops it from the queue, unless it tries again first.
    pub deadline: Duration,
}

impl LockClient {
    /// Locks whose names match the glob `pattern` (Redis `SCAN MATCH` syntax), held or not, sorted
    /// by name, with what each primitive keeps (holders, queue, permits, lock-delay). Scans
    /// incrementally (every master of a cluster, every node of Redlock), then reads each name
    /// with one read-only script on the server of its hash tag; safe on a busy server. On
    /// Redlock only the plain lock is read (the primitives are refused there); a name with a
    /// primitive's keys shows [`LockKind::Unsupported`].
    pub async fn inspect(&self, pattern: &str) -> Result<Vec<LockInfo>> {
        let core = self.core();
        core.backend.inspect(&core.config.prefix, pattern).await
    }
}

/// Reads every key of a name without writing any. KEYS: lock, fence, delay, grants, readers,
/// writer-waiting, permits, limit, queue, queue-deadlines. Returns `{lock type, lock pttl, holder
/// id or false, owner or false, fence or false, delay pttl, grants, readers, writer-waiting pttl,
/// permits, limit or false, queue}`; each of grants, readers, permits and queue is a flat list of
/// `id, ms left` over live members (the queue in order, with each waiter's deadline).
const READ: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
local lock = kind(KEYS[1])
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
return {lock, redis.call('PTTL', KEYS[1]), holder, owner, fence, redis.call('PTTL', KEYS[3]),
  members(KEYS[4]), members(KEYS[5]), redis.call('PTTL', KEYS[6]), members(KEYS[7]), limit, queue}
";

static READ_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(READ));

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
