//! [`LockInfo`]: what operators see of one lock (holders, queue, permits, lock-delay), as every
//! backend reports it. Only data: each backend gathers it its own way.

use std::time::Duration;

use super::fence::Fence;

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
