//! [`Hold`]: what one lease holds in Redis, and so which scripts acquire, extend and release it.
//! The acquire loop, the guard, the watchdog and the backends are written once against it; each
//! primitive (`primitives/`) only contributes its scripts.

use std::time::Duration;

use crate::{
    keys::{LockKeys, suffix},
    primitives::{fair, read_write, reentrant, semaphore},
    scripts::{self, Call},
};

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

/// Which primitive, with what it needs to know for its scripts.
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
}

impl Hold {
    pub(crate) fn new(keys: LockKeys, kind: HoldKind) -> Self {
        Self { keys, kind, ticket: crate::acquire::new_token() }
    }

    /// The attempt to take it for `token` with a lease of `lease`.
    pub(crate) fn acquire(&self, token: &str, lease: Duration) -> Call {
        let keys = &self.keys;
        match &self.kind {
            HoldKind::Lock { delay } => scripts::plain_acquire(keys, token, lease, *delay),
            HoldKind::Reentrant { owner } => reentrant::acquire(keys, token, lease, owner),
            HoldKind::Read => read_write::acquire_read(keys, token, lease),
            HoldKind::Write { prefer_writers } => read_write::acquire_write(keys, token, lease, *prefer_writers),
            HoldKind::Permit { permits } => semaphore::acquire(keys, token, lease, *permits),
            HoldKind::Fair { queue_timeout } => fair::acquire(keys, token, lease, &self.ticket, *queue_timeout),
        }
    }

    /// The owner-checked extension of `token`'s grant to `lease` from now.
    pub(crate) fn extend(&self, token: &str, lease: Duration) -> Call {
        let keys = &self.keys;
        match &self.kind {
            HoldKind::Lock { delay } => scripts::plain_extend(keys, token, lease, *delay),
            HoldKind::Write { .. } | HoldKind::Fair { .. } => scripts::plain_extend(keys, token, lease, Duration::ZERO),
            HoldKind::Reentrant { .. } => reentrant::extend(keys, token, lease),
            HoldKind::Read => read_write::extend_read(keys, token, lease),
            HoldKind::Permit { .. } => semaphore::extend(keys, token, lease),
        }
    }

    /// The owner-checked release of `token`'s grant, which wakes waiters.
    pub(crate) fn release(&self, token: &str) -> Call {
        let keys = &self.keys;
        match &self.kind {
            HoldKind::Lock { delay } => scripts::plain_release(keys, token, *delay),
            HoldKind::Write { .. } => scripts::plain_release(keys, token, Duration::ZERO),
            HoldKind::Reentrant { .. } => reentrant::release(keys, token),
            HoldKind::Read => read_write::release_read(keys, token),
            HoldKind::Permit { .. } => semaphore::release(keys, token),
            HoldKind::Fair { .. } => fair::release(keys, token),
        }
    }

    /// Whether its release is an owner-checked delete of the lock key and nothing more (the plain
    /// lock without a lock-delay, a read-write lock's write side): what a server's own
    /// compare-and-delete command can do without a script.
    pub(crate) fn releases_by_compare_and_delete(&self) -> bool {
        matches!(self.kind, HoldKind::Lock { delay } if delay.is_zero()) || matches!(self.kind, HoldKind::Write { .. })
    }

    /// What a waiter that gives up (wait over, or its acquire dropped) must undo on the server:
    /// a fair lock's queue place. `None` for the others, which leave nothing behind.
    pub(crate) fn leave(&self) -> Option<Call> {
        match &self.kind {
            HoldKind::Fair { .. } => Some(fair::leave(&self.keys, &self.ticket)),
            _ => None,
        }
    }

    /// The pub/sub channel whose messages wake this waiter: the lock's release channel, or a fair
    /// waiter's own channel (a release wakes the head of the queue, nobody else).
    pub(crate) fn wake_channel(&self) -> String {
        match &self.kind {
            HoldKind::Fair { .. } => fair::wake_channel(&self.keys, &self.ticket),
            _ => self.keys.released.clone(),
        }
    }

    /// Whether a release should wake every waiter of the process rather than one: several may get
    /// in at once (readers, permits), or the one woken may not be the one that can (a reader kept
    /// out by a waiting writer).
    pub(crate) fn wakes_all(&self) -> bool {
        matches!(self.kind, HoldKind::Read | HoldKind::Write { .. } | HoldKind::Permit { .. })
    }

    /// Whether it runs on Redlock: only the plain lock (with or without a lock-delay) does; the
    /// primitives keep state (counts, queues, permits) that a vote of independent masters cannot
    /// agree on.
    pub(crate) fn runs_on_redlock(&self) -> bool {
        matches!(self.kind, HoldKind::Lock { .. })
    }

    /// Whether it is the plain lock without a lock-delay: the one lock the ZooKeeper, etcd and
    /// PostgreSQL backends keep (the primitives are Lua scripts on Redis).
    #[cfg_attr(not(any(feature = "zookeeper", feature = "etcd", feature = "postgres")), allow(dead_code))]
    pub(crate) fn is_plain_lock(&self) -> bool {
        matches!(self.kind, HoldKind::Lock { delay } if delay.is_zero())
    }

    /// What the primitive is called in messages.
    pub(crate) fn what(&self) -> &'static str {
        match self.kind {
            HoldKind::Lock { .. } => "lock",
            HoldKind::Reentrant { .. } => "reentrant lock",
            HoldKind::Read | HoldKind::Write { .. } => "read-write lock",
            HoldKind::Permit { .. } => "semaphore",
            HoldKind::Fair { .. } => "fair lock",
        }
    }
}

/// Keys a name's primitives may use besides the lock key and the fence counter.
pub(crate) fn side_keys(keys: &LockKeys) -> Vec<String> {
    suffix::IN_USE.iter().map(|s| keys.key(s)).collect()
}
