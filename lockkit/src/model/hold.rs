//! [`Hold`]: what one lease holds (a plain lock, a reentrant grant, a read share, a write grant, a
//! permit, a fair waiter), as data. The acquire loop, the guard, the watchdog and the backends are
//! written once against it; how each backend keeps it is the backend's business (the Redis layer
//! maps it to its scripts in `backend::redis::holds`).

use std::time::Duration;

use super::{backend_kind::Capability, keys::LockKeys, token::new_token};

/// A lock (or a permit, a read share, a reentrant grant) that leases are taken on.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) keys: LockKeys,
    pub(crate) kind: HoldKind,
    /// One random id per acquire, shared by its attempts (tokens are one per attempt): a waiter's
    /// place in a queue. The fair lock queues under it on Redis; ZooKeeper and etcd name the
    /// waiter's node by it, so that a later attempt finds its place and a cancelled acquire's undo
    /// finds what it left.
    pub(crate) ticket: String,
}

/// Which primitive, with what it needs to know to be kept.
#[derive(Debug, Clone)]
pub(crate) enum HoldKind {
    /// The plain lock: `{prefix:name}` holds the owner token. With a lock-delay, a lease that
    /// ends without a release keeps the lock unavailable for `delay` more.
    Lock { delay: Duration },
    /// A reentrant lock held by `owner`: every grant of that owner shares one fence.
    Reentrant { owner: String },
    /// A read share of a read-write lock (kept out while a preferred writer waits).
    Read,
    /// The write side of a read-write lock; with writer preference, a waiting writer keeps new
    /// readers out for `mark` (refreshed by each of its attempts).
    Write { prefer_writers: Option<Duration> },
    /// One permit of a semaphore of `permits`.
    Permit { permits: u32 },
    /// A fair lock's waiter, in the queue under the hold's `ticket` (one per acquire, shared by its
    /// attempts), dropped from it by the server `queue_timeout` after its last attempt.
    Fair { queue_timeout: Duration },
    /// A candidate of a leader election (`election`): the plain lock, with the candidate's
    /// `value` stored beside it (or in the lock's own node or key, where the backend names its
    /// contenders) for as long as the lease lasts. Every backend keeps it.
    Leader { value: String },
}

impl Hold {
    pub(crate) fn new(keys: LockKeys, kind: HoldKind) -> Self {
        Self { keys, kind, ticket: new_token() }
    }

    /// What a backend must keep besides the plain lock to grant it (`None`: the plain lock alone).
    pub(crate) fn needs(&self) -> Option<Capability> {
        match self.kind {
            HoldKind::Lock { delay } if delay.is_zero() => None,
            HoldKind::Leader { .. } => None,
            HoldKind::Lock { .. } => Some(Capability::LockDelay),
            HoldKind::Reentrant { .. } => Some(Capability::Reentrant),
            HoldKind::Read | HoldKind::Write { .. } => Some(Capability::ReadWrite),
            HoldKind::Permit { .. } => Some(Capability::Semaphore),
            HoldKind::Fair { .. } => Some(Capability::Fair),
        }
    }

    /// The wake-up channel whose messages wake this waiter: the lock's release channel, or a fair
    /// waiter's own channel (a release wakes the head of the queue, nobody else).
    pub(crate) fn wake_channel(&self) -> String {
        match &self.kind {
            HoldKind::Fair { .. } => format!("{}{}", self.keys.fair_wake_prefix(), self.ticket),
            _ => self.keys.released.clone(),
        }
    }

    /// The wake-up channel of this acquire alone, for waiters woken one by one by what they
    /// watch (see `Backend::wake_channel`).
    #[cfg_attr(not(any(feature = "zookeeper", feature = "etcd")), allow(dead_code))]
    pub(crate) fn waiter_channel(&self) -> String {
        format!("{}:{}", self.keys.released, self.ticket)
    }

    /// Whether a release should wake every waiter of the process rather than one: several may get
    /// in at once (readers, permits), or the one woken may not be the one that can (a reader kept
    /// out by a waiting writer).
    pub(crate) fn wakes_all(&self) -> bool {
        matches!(self.kind, HoldKind::Read | HoldKind::Write { .. } | HoldKind::Permit { .. })
    }

    /// A leader's value, when this is a candidate of an election.
    #[cfg_attr(not(any(feature = "zookeeper", feature = "etcd", feature = "postgres")), allow(dead_code))]
    pub(crate) fn leader_value(&self) -> Option<&str> {
        match &self.kind {
            HoldKind::Leader { value } => Some(value),
            _ => None,
        }
    }

    /// Whether it is the plain lock without a lock-delay, or a leader's (a plain lock that carries
    /// a value): the locks every backend keeps.
    #[cfg_attr(not(any(feature = "zookeeper", feature = "etcd")), allow(dead_code))]
    pub(crate) fn is_plain_lock(&self) -> bool {
        self.needs().is_none()
    }
}
