//! Test-only switches, each removing exactly one protection, so that a test can run the same
//! scenario without it (the control) and show that the protection is what made it pass. Hidden
//! from the docs: no application has a reason to turn a protection off.

/// A protection that a test may switch off with
/// [`LockClientBuilder::unprotected`](crate::LockClientBuilder::unprotected).
#[doc(hidden)]
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unprotected {
    /// ZooKeeper: a renewal reads the lock node without a `sync` first, so a follower may answer
    /// it from its own, possibly stale, view.
    ZooKeeperRenewalWithoutSync,
    /// PostgreSQL: `LISTEN` is trusted once it succeeded, without checking that a `NOTIFY` sent
    /// from another session comes back on it (behind a transaction-pooling PgBouncer none does).
    PostgresListenUnchecked,
    /// Sentinel: a master promoted in a failover grants fences without first raising the
    /// counters to its epoch's floor, so a fence that replication lost can be handed out again.
    SentinelFenceFloor,
}

/// The protections switched off for one client (none outside tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Controls(Vec<Unprotected>);

impl Controls {
    pub(crate) fn remove(&mut self, protection: Unprotected) {
        if !self.0.contains(&protection) {
            self.0.push(protection);
        }
    }

    /// Whether `protection` is in force (not switched off).
    pub(crate) fn keeps(&self, protection: Unprotected) -> bool {
        !self.0.contains(&protection)
    }
}
