//! Read-only views of locks for operators: who holds what, for how long, at which fence. Each
//! backend gathers them ([`Backend::inspect`](crate::backend::Backend)) from the per-server views
//! read here.

use std::{collections::BTreeSet, time::Duration};

use redis::{
    AsyncCommands,
    aio::{ConnectionLike, MultiplexedConnection},
};

use crate::{Fence, LockClient, error::Result, keys::LockKeys};

/// The state of one lock as its servers see it right now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name (without prefix).
    pub name: String,
    /// Whether the lock key exists (by lockkit or any client using the same key). On Redlock:
    /// on a majority of the nodes.
    pub held: bool,
    /// Lease left, if held with an expiry (on Redlock: the shortest among the holding nodes).
    pub ttl: Option<Duration>,
    /// The fence counter: the fence of the latest grant (on Redlock: the largest on any node).
    /// `None` if never granted (or Redis lost it).
    pub fence: Option<Fence>,
}

impl LockClient {
    /// Locks whose names match the glob `pattern` (Redis `SCAN MATCH` syntax), held or not, sorted
    /// by name. Scans incrementally (every master of a cluster, every node of Redlock); safe on a
    /// busy server.
    pub async fn inspect(&self, pattern: &str) -> Result<Vec<LockInfo>> {
        let core = self.core();
        core.backend.inspect(&core.config.prefix, pattern).await
    }
}

/// One server's view of one lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeView {
    pub(crate) exists: bool,
    pub(crate) ttl: Option<Duration>,
    pub(crate) fence: Option<u64>,
}

impl NodeView {
    pub(crate) fn into_info(self, name: String) -> LockInfo {
        LockInfo { name, held: self.exists, ttl: self.ttl, fence: self.fence.map(Fence::new) }
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

/// This server's view of one lock, in one round trip.
pub(crate) async fn read_view(conn: &mut impl ConnectionLike, keys: &LockKeys) -> redis::RedisResult<NodeView> {
    let mut pipe = redis::pipe();
    pipe.exists(&keys.lock).pttl(&keys.lock).get(&keys.fence);
    let (exists, pttl, fence): (bool, i64, Option<u64>) = pipe.query_async(conn).await?;
    Ok(NodeView { exists, ttl: (pttl > 0).then(|| Duration::from_millis(pttl as u64)), fence })
}
