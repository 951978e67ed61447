//! Read-only views of locks for operators: who holds what, for how long, at which fence.

use std::{collections::BTreeSet, time::Duration};

use redis::AsyncCommands;

use crate::{Fence, LockClient, error::Result, keys::LockKeys};

/// The state of one lock as Redis sees it right now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name (without prefix).
    pub name: String,
    /// Whether the lock key exists (by lockkit or any client using the same key).
    pub held: bool,
    /// Lease left, if held with an expiry.
    pub ttl: Option<Duration>,
    /// The fence counter: the fence of the latest grant. `None` if never granted (or Redis lost it).
    pub fence: Option<Fence>,
}

impl LockClient {
    /// Locks whose names match the glob `pattern` (Redis `SCAN MATCH` syntax), held or not, sorted
    /// by name. Scans incrementally; safe on a busy server.
    pub async fn inspect(&self, pattern: &str) -> Result<Vec<LockInfo>> {
        let core = self.core();
        let prefix = &core.config.prefix;
        // Through the connection layer, so a broken connection is reported and replaced.
        let matched: Vec<String> = core
            .conns
            .run(async |conn| {
                let mut matched = Vec::new();
                let mut keys = conn.scan_match::<_, String>(format!("{{{prefix}:{pattern}}}*")).await?;
                while let Some(key) = keys.next_item().await {
                    matched.push(key?);
                }
                Ok(matched)
            })
            .await?;
        let names: BTreeSet<&str> = matched.iter().filter_map(|key| LockKeys::name_of(prefix, key)).collect();
        let mut infos = Vec::with_capacity(names.len());
        for name in names {
            let keys = LockKeys::new(prefix, name)?;
            let mut pipe = redis::pipe();
            pipe.exists(&keys.lock).pttl(&keys.lock).get(&keys.fence);
            let (exists, pttl, fence): (bool, i64, Option<u64>) =
                core.conns.run(async |conn| pipe.query_async(conn).await).await?;
            infos.push(LockInfo {
                name: name.to_owned(),
                held: exists,
                ttl: (pttl > 0).then(|| Duration::from_millis(pttl as u64)),
                fence: fence.map(Fence::new),
            });
        }
        Ok(infos)
    }
}
