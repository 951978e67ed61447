//! [`BackendKind`]: which deployment a client talks to, and [`Capability`]: what it can keep
//! besides the plain lock. Capabilities are a property of the kind, known before any request, so
//! that a caller can ask [`LockClient::supports`](crate::LockClient::supports) instead of
//! meeting an error at run time.

use std::fmt;

/// Which kind of deployment a [`LockClient`](crate::LockClient) talks to, chosen by its URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// One Redis server (`redis://`, `rediss://`).
    Redis,
    /// A Redis Cluster (`redis+cluster://`, `rediss+cluster://`).
    RedisCluster,
    /// One Redis master found through Sentinel and followed through failovers
    /// (`redis+sentinel://`, `rediss+sentinel://`). After a failover, fences start above every
    /// fence granted before it; a lock whose grant the failover lost may be held twice for at most
    /// one lease.
    RedisSentinel,
    /// Redlock over independent Redis masters (`redlock://`, `redlocks://`).
    Redlock {
        /// Masters in the URL.
        nodes: usize,
        /// Masters that must agree: a majority.
        quorum: usize,
    },
    /// A ZooKeeper ensemble (`zk://`): ephemeral sequential nodes kept alive by the session.
    ZooKeeper,
    /// An etcd v3 cluster (`etcd://`): a key per waiter under a lease kept alive.
    Etcd,
    /// PostgreSQL (`postgres://`): a lease table timed by the server's clock.
    Postgres,
    /// PostgreSQL session advisory locks (`postgres+advisory://`): held while the session lives.
    PostgresAdvisory,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Redis => f.write_str("redis"),
            Self::RedisCluster => f.write_str("redis-cluster"),
            Self::RedisSentinel => f.write_str("redis-sentinel"),
            Self::Redlock { nodes, quorum } => write!(f, "redlock ({quorum} of {nodes})"),
            Self::ZooKeeper => f.write_str("zookeeper"),
            Self::Etcd => f.write_str("etcd"),
            Self::Postgres => f.write_str("postgres"),
            Self::PostgresAdvisory => f.write_str("postgres-advisory"),
        }
    }
}

/// What a backend can do besides the plain fenced lock, which every backend keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// [`LockClient::reentrant`](crate::LockClient::reentrant).
    Reentrant,
    /// [`LockClient::fair`](crate::LockClient::fair).
    Fair,
    /// [`LockClient::read_write`](crate::LockClient::read_write) and
    /// [`LockGuard::downgrade`](crate::LockGuard::downgrade).
    ReadWrite,
    /// [`LockClient::semaphore`](crate::LockClient::semaphore).
    Semaphore,
    /// [`Acquire::lock_delay`](crate::Acquire::lock_delay).
    LockDelay,
    /// [`LockClient::retire_fence`](crate::LockClient::retire_fence).
    RetireFence,
}

impl Capability {
    /// Every capability, for tables and tests.
    pub const ALL: [Capability; 6] =
        [Self::Reentrant, Self::Fair, Self::ReadWrite, Self::Semaphore, Self::LockDelay, Self::RetireFence];

    /// What it is called in messages.
    pub(crate) fn what(self) -> &'static str {
        match self {
            Self::Reentrant => "reentrant lock",
            Self::Fair => "fair lock",
            Self::ReadWrite => "read-write lock",
            Self::Semaphore => "semaphore",
            Self::LockDelay => "lock-delay",
            Self::RetireFence => "fence retirement",
        }
    }
}

impl BackendKind {
    /// Whether this backend keeps `capability`. The primitives are Lua scripts that need one
    /// Redis (alone or behind Sentinel) or a cluster (one server per name); Redlock keeps the plain lock and its lock-delay,
    /// because both are per-node keys that a majority vote can agree on, but no counts or queues,
    /// and no retirement (a node that missed it would keep a counter the others forgot).
    /// ZooKeeper, etcd and PostgreSQL keep the plain lock only.
    pub fn supports(self, capability: Capability) -> bool {
        match self {
            Self::Redis | Self::RedisCluster | Self::RedisSentinel => true,
            Self::Redlock { .. } => capability == Capability::LockDelay,
            Self::ZooKeeper | Self::Etcd | Self::Postgres | Self::PostgresAdvisory => false,
        }
    }
}
