//! [`LockClient::inspect`]: read-only views of locks for operators: who holds what, for how long,
//! at which fence, and for the primitives their holders, queue, permits and lock-delay. Each
//! backend gathers them its own way; tokens are secrets, so no view shows one.

use crate::{
    LockClient,
    model::{error::Result, lock_info::LockInfo},
};

impl LockClient {
    /// Locks whose names match the glob `pattern` (Redis `SCAN MATCH` syntax), held or not, sorted
    /// by name, with what each primitive keeps (holders, queue, permits, lock-delay). Scans
    /// incrementally (every master of a cluster, every node of Redlock), then reads each name
    /// with one read-only script on the server of its hash tag; safe on a busy server. On
    /// Redlock only the plain lock is read (the primitives are refused there); a name with a
    /// primitive's keys shows [`LockKind::Unsupported`](crate::LockKind::Unsupported).
    pub async fn inspect(&self, pattern: &str) -> Result<Vec<LockInfo>> {
        let core = self.core();
        core.backend.inspect(&core.config.prefix, pattern).await
    }
}
