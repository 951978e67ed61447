//! Retiring the fence counter of a name that will not be used again (Redisson #6510: fence
//! counters that pile up forever).
//!
//! A fence counter must outlive every lease of its name: deleted while the name is still in use,
//! the next grant would start again at 1 and fences would go backwards. So lockkit never deletes
//! one by itself; [`LockClient::retire_fence`] does it on request, only while nothing holds or
//! waits for the name, and hands back the last value.

use crate::{
    LockClient,
    backend::redis::retire,
    model::{backend_kind::Capability, error::Result, fence::FenceRetirement, keys::LockKeys},
};

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
        retire::retire(core.scripts_for(Capability::RetireFence)?, &keys).await
    }
}
