//! The backend seam: the few operations a lock needs from the servers that keep it. Everything
//! above it (the acquire loop, the guard, the watchdog, release, metrics, errors) is written once
//! against [`Backend`]; a backend only says how one attempt, one release, one batch of renewals
//! and one fence raise reach its servers.
//!
//! | backend | URL | file |
//! |---|---|---|
//! | one Redis | `redis://`, `rediss://` | `single` |
//! | Redis Cluster | `redis+cluster://`, `rediss+cluster://` | `cluster` |
//! | Redlock over independent masters | `redlock://`, `redlocks://` | `redlock` |
//! | ZooKeeper (feature `zookeeper`) | `zk://` | `zookeeper` |
//! | etcd v3 (feature `etcd`) | `etcd://` | `etcd` |
//! | PostgreSQL (feature `postgres`) | `postgres://`, `postgres+advisory://` | `postgres` |

mod cluster;
mod compare_delete;
#[cfg(feature = "etcd")]
mod etcd;
mod eviction;
#[cfg(feature = "postgres")]
mod postgres;
mod redlock;
mod single;
mod url;
#[cfg(feature = "zookeeper")]
mod zookeeper;

use std::{fmt, future::Future, pin::Pin, sync::Arc, time::Duration};

use redis::aio::ConnectionLike;

#[cfg(feature = "postgres")]
pub(crate) use self::url::PgMode;
pub(crate) use self::url::{BackendUrl, take_allow_eviction};
use crate::{
    Fence, LockInfo,
    core::{Config, Jobs},
    error::Result,
    hold::Hold,
    keys::LockKeys,
    scripts::{self, AcquireReply, Call},
    wake::WakeHub,
};

/// A boxed future, so that [`Backend`] can be used as a trait object.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Which kind of deployment a [`LockClient`](crate::LockClient) talks to, chosen by its URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// One Redis server (`redis://`, `rediss://`).
    Redis,
    /// A Redis Cluster (`redis+cluster://`, `rediss+cluster://`).
    RedisCluster,
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
            Self::Redlock { nodes, quorum } => write!(f, "redlock ({quorum} of {nodes})"),
            Self::ZooKeeper => f.write_str("zookeeper"),
            Self::Etcd => f.write_str("etcd"),
            Self::Postgres => f.write_str("postgres"),
            Self::PostgresAdvisory => f.write_str("postgres-advisory"),
        }
    }
}

/// What one acquire attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// The lock is ours, under this fence.
    Granted(Fence),
    /// Someone else holds it, with this much lease left (`None`: unknown or no expiry).
    Held(Option<Duration>),
    /// Nobody won (Redlock's split vote): every partial grant was undone; retry after a jittered
    /// pause rather than at once, so that contenders do not split again.
    Contested,
}

impl From<AcquireReply> for Grant {
    fn from(reply: AcquireReply) -> Self {
        match reply {
            AcquireReply::Granted(fence) => Self::Granted(Fence::new(fence)),
            AcquireReply::Held(ttl) => Self::Held(ttl),
        }
    }
}

/// One lease to renew.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal<'a> {
    pub(crate) hold: &'a Hold,
    pub(crate) token: &'a str,
    pub(crate) lease: Duration,
}

/// What a renewal came to, per lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Extended by `lease` from when the request was sent.
    Extended,
    /// The lock is no longer ours (expired, deleted, taken over).
    Gone,
    /// No answer good enough to tell: retry until the deadline.
    Unanswered,
}

/// The servers that keep the locks. Implementations must make every operation owner-checked by
/// the token and bounded in time; the callers handle timetables, loss and metrics.
pub(crate) trait Backend: Send + Sync + fmt::Debug {
    /// Which kind this is.
    fn kind(&self) -> BackendKind;

    /// Checks that the servers answer (for one Redis and a cluster) or says which do not (Redlock
    /// connects to whatever answers: its nodes may come back).
    fn ping(&self) -> BoxFuture<'_, Result<()>>;

    /// Refuses servers whose eviction policy may drop lock keys (see `eviction`): Redis backends
    /// read `maxmemory-policy` on every server they reach. The others keep nothing evictable.
    fn check_eviction(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// One attempt to take `hold` for `token` with a lease of `lease`. If the future is dropped
    /// after the request may have reached a server, the backend hands an owner-checked undo to
    /// `jobs`, ordered after the request. A backend that cannot keep the primitive refuses with
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    fn acquire<'a>(
        &'a self,
        hold: &'a Arc<Hold>,
        token: &'a str,
        lease: Duration,
        jobs: &'a Jobs,
    ) -> BoxFuture<'a, Result<Grant>>;

    /// Owner-checked release that wakes waiters; true when `token` still held its grant.
    fn release<'a>(&'a self, hold: &'a Hold, token: &'a str) -> BoxFuture<'a, Result<bool>>;

    /// Runs one of a primitive's own scripts (a queue exit, a downgrade, a fence retirement) on
    /// the servers of its one hash tag. Redlock refuses with
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    fn run<'a>(&'a self, call: &'a Call) -> BoxFuture<'a, Result<redis::Value>>;

    /// Renews a batch of leases, one outcome per lease in order. The caller bounds the whole call.
    fn renew<'a>(&'a self, batch: &'a [Renewal<'a>]) -> BoxFuture<'a, Result<Vec<Renewed>>>;

    /// Raises the fence counter of a lock to at least `at_least`; returns its value afterwards.
    fn raise_fence<'a>(&'a self, keys: &'a LockKeys, at_least: Fence) -> BoxFuture<'a, Result<Fence>>;

    /// Locks under `prefix` whose names match `pattern`, sorted by name.
    fn inspect<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> BoxFuture<'a, Result<Vec<LockInfo>>>;

    /// The wake-up hub that tells waiters about releases.
    fn wake(&self) -> &WakeHub;

    /// Whether only plain locks run here (no reentrant, fair, read-write, semaphore or lock-delay
    /// primitives): the acquire path then refuses the others before asking the backend. The
    /// default (Redis) runs them all.
    fn plain_locks_only(&self) -> bool {
        false
    }

    /// The lease a grant gets when `requested` is asked for: at most what the servers can vouch
    /// for (a ZooKeeper lock lives as long as its session, so at most the negotiated session
    /// timeout). The default grants what was asked.
    fn lease_for(&self, requested: Duration) -> Duration {
        requested
    }

    /// Whether an acquire of `hold` that gives up (its wait is over, or it was dropped) leaves
    /// something on the servers to undo: a fair lock's queue place, a waiter's node.
    fn must_leave(&self, hold: &Hold) -> bool {
        hold.leave().is_some()
    }

    /// Undoes what a waiter that gave up left on the servers (see [`must_leave`](Self::must_leave)).
    /// The default runs the primitive's own leave script.
    fn leave<'a>(&'a self, hold: &'a Hold) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if let Some(call) = hold.leave() {
                self.run(&call).await?;
            }
            Ok(())
        })
    }
}

/// The error of a primitive the backend cannot keep.
pub(crate) fn unsupported(backend: BackendKind, hold: &Hold) -> crate::error::Error {
    crate::error::Error::unsupported(format!(
        "the {} is not available on {backend}: it needs Redis (one server or a cluster)",
        hold.what()
    ))
}

/// Opens the backend that `url` names. Redis backends connect lazily; ZooKeeper, etcd and
/// PostgreSQL open their session (bounded by the command timeout).
pub(crate) async fn open(url: &BackendUrl, config: &Config, connections: usize) -> Result<Arc<dyn Backend>> {
    Ok(match url {
        BackendUrl::Redis(url) => Arc::new(single::SingleRedis::open(url, config, connections)?),
        BackendUrl::Cluster(nodes) => Arc::new(cluster::RedisCluster::open(nodes, config)?),
        BackendUrl::Redlock(nodes) => Arc::new(redlock::Redlock::open(nodes, config, connections)?),
        #[cfg(feature = "zookeeper")]
        BackendUrl::ZooKeeper { servers, chroot, credentials } => {
            zookeeper::open(servers, chroot, credentials.as_ref(), config).await?
        }
        #[cfg(feature = "etcd")]
        BackendUrl::Etcd { endpoints, credentials } => etcd::open(endpoints, credentials.as_ref(), config).await?,
        #[cfg(feature = "postgres")]
        BackendUrl::Postgres { url, mode } => postgres::open(url, *mode, config, connections).await?,
        #[allow(unreachable_patterns)]
        other => {
            return Err(crate::error::Error::new(
                crate::ErrorKind::Config,
                format!("{} URLs need lockkit's `{}` feature", other.scheme(), other.feature()),
            ));
        }
    })
}

/// Hands an owner-checked undo to the background if an acquire is dropped while its request may
/// have reached a server. The undo is prepared before the request is sent, on the same connection,
/// so that it reaches the server after the request.
pub(crate) struct UndoOnCancel<'a> {
    jobs: &'a Jobs,
    armed: Option<BoxFuture<'static, ()>>,
}

impl<'a> UndoOnCancel<'a> {
    /// Arms `undo`; it runs in the background unless [`disarm`](Self::disarm)ed first.
    pub(crate) fn new(jobs: &'a Jobs, undo: impl Future<Output = ()> + Send + 'static) -> Self {
        Self { jobs, armed: Some(Box::pin(undo)) }
    }

    /// Arms an owner-checked release of `token` on `conn` (a clone of the connection that carries
    /// the acquire).
    pub(crate) fn release_on(
        jobs: &'a Jobs,
        mut conn: impl ConnectionLike + Send + 'static,
        hold: &Arc<Hold>,
        token: &str,
    ) -> Self {
        let (name, release) = (hold.keys.name.clone(), hold.release(token));
        Self::new(jobs, async move {
            if let Err(e) = scripts::owner_checked(&mut conn, &release).await {
                tracing::warn!(lock = %name, error = %e, "could not undo an abandoned acquire; it will expire");
            }
        })
    }

    /// The reply was read: nothing to undo.
    pub(crate) fn disarm(&mut self) {
        self.armed = None;
    }
}

impl Drop for UndoOnCancel<'_> {
    fn drop(&mut self) {
        if let Some(undo) = self.armed.take() {
            self.jobs.send(crate::core::Job::Background(undo));
        }
    }
}
