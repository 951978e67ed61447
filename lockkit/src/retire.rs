//! Retiring the fence counter of a name that will not be used again (Redisson #6510: fence
//! counters that pile up forever).
//!
//! A fence counter must outlive every lease of its name: deleted while the name is still in use,
//! the next grant would start again at 1 and fences would go backwards. So lockkit never deletes
//! one by itself; [`LockClient::retire_fence`] does it on request, only while nothing holds or
//! waits for the name, and hands back the last value.

use crate::{Fence, LockClient, error::Result, hold, keys::LockKeys, scripts::Call};

/// Deletes the fence counter if no key of the name exists. KEYS: fence, then every other key of
/// the name. Returns `{1, last}`, `{0, '0'}` while in use, `{2, '0'}` when there is no counter.
const RETIRE: &str = r"
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return {0, '0'} end
end
local last = redis.call('GET', KEYS[1])
if not last then return {2, '0'} end
redis.call('DEL', KEYS[1])
return {1, last}
";

static RETIRE_SCRIPT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| redis::Script::new(RETIRE));

/// What [`LockClient::retire_fence`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FenceRetirement {
    /// The counter was deleted; `last` was its value. Keep it where your store keeps fences.
    Retired {
        /// The last fence granted under the name.
        last: Fence,
    },
    /// Something holds or waits for the name (a lock, a permit, a reader, a queue, a lock-delay):
    /// nothing was deleted.
    InUse,
    /// The name has no counter (never granted, already retired, or Redis lost it).
    Absent,
}

impl LockClient {
    /// Deletes the fence counter of `name`, if nothing holds or waits for it right now, and returns
    /// its last value. For names that will not be used again (per-order or per-job locks), so that
    /// counters do not pile up forever.
    ///
    /// Before retiring a name, the store must no longer accept writes fenced under it, or must
    /// keep the returned `last` fence as the highest it has seen for that name: if the name is
    /// ever used again, its counter starts from 1, and only
    /// [`ensure_fence_at_least`](Self::ensure_fence_at_least)`(name, last)` before the first new
    /// grant keeps fences from going backwards. A holder whose lease already ended may still be
    /// writing with an old fence; the store's fence check is what refuses it, as always.
    ///
    /// Only on one Redis or a Redis Cluster; elsewhere it fails with
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) (on Redlock a node that misses the retirement
    /// would keep a counter that the others forgot).
    ///
    /// ```no_run
    /// # async fn demo(client: lockkit::LockClient) -> lockkit::Result<()> {
    /// use lockkit::FenceRetirement;
    /// match client.retire_fence("order:1001").await? {
    ///     FenceRetirement::Retired { last } => println!("retired at fence {last}"),
    ///     FenceRetirement::InUse => println!("still in use; try later"),
    ///     _ => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn retire_fence(&self, name: &str) -> Result<FenceRetirement> {
        let core = self.core();
        let keys = LockKeys::new(&core.config.prefix, name)?;
        let mut call_keys = vec![keys.fence.clone(), keys.lock.clone()];
        call_keys.extend(hold::side_keys(&keys));
        let call = Call::new(&RETIRE_SCRIPT, call_keys, Vec::new());
        let (outcome, last): (i64, String) = redis::from_redis_value(core.backend.run(&call).await?)?;
        Ok(match outcome {
            1 => FenceRetirement::Retired { last: Fence::new(parse_fence(&last)?) },
            0 => FenceRetirement::InUse,
            _ => FenceRetirement::Absent,
        })
    }
}

fn parse_fence(value: &str) -> Result<u64> {
    value.parse().map_err(|_| {
        redis::RedisError::from((redis::ErrorKind::Parse, "the fence counter is not a number", value.to_owned())).into()
    })
}
