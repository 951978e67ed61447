//! The backend seam: the few operations a lock needs from the servers that keep it. Everything
//! above it (the acquire loop, the guard, the watchdog, release, metrics, errors) is written once
//! against [`Backend`]; a backend only says how one attempt, one release, one batch of renewals
//! and one fence raise reach its servers.
//!
//!
//! [`Backend`] is backend-neutral: it names holds, tokens, fences and leases, never a script. What
//! only Redis can do (run a primitive's own script) is the extension trait
//! [`RedisScripts`](redis::RedisScripts), which a backend offers through
//! [`Backend::redis_scripts`]. Which primitives a backend keeps is its
//! [`BackendKind::supports`](crate::BackendKind::supports), checked before any request.
//!
//! | backend | URL | file |
//! |---|---|---|
//! | one Redis | `redis://`, `rediss://` | `redis::single` |
//! | Redis Cluster | `redis+cluster://`, `rediss+cluster://` | `redis::cluster` |
//! | one Redis master found through Sentinel | `redis+sentinel://`, `rediss+sentinel://` | `redis::sentinel` |
//! | Redlock over independent masters | `redlock://`, `redlocks://` | `redis::redlock` |
//! | ZooKeeper (feature `zookeeper`) | `zk://` | `zookeeper` |
//! | etcd v3 (feature `etcd`) | `etcd://` | `etcd` |
//! | PostgreSQL (feature `postgres`) | `postgres://`, `postgres+advisory://` | `postgres` |

#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod redis;
mod url;
#[cfg(feature = "zookeeper")]
mod zookeeper;

use std::{fmt, future::Future, pin::Pin, sync::Arc, time::Duration};

use self::redis::RedisScripts;
#[cfg(feature = "postgres")]
pub(crate) use self::url::PgMode;
pub(crate) use self::url::{BackendUrl, take_allow_eviction};
use crate::{
    jobs::Jobs,
    model::{
        backend_kind::BackendKind,
        error::{Error, Result},
        fence::Fence,
        grant::{Grant, Renewal, Renewed},
        hold::Hold,
        keys::LockKeys,
        leader::Leader,
        lock_info::LockInfo,
        settings::Config,
    },
    wake::WakeHub,
};

/// A boxed future, so that [`Backend`] can be used as a trait object.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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

    /// The first attempt of an acquire, made before its caller listens for wake-ups: if refused,
    /// it need not announce a waiter (a caller that waits tries again once it listens, with
    /// [`acquire`](Self::acquire)), and it may spend a fence. One Redis uses that to take the
    /// plain lock without a script (`backend::redis::first_attempt`). The default is
    /// [`acquire`](Self::acquire).
    fn acquire_first<'a>(
        &'a self,
        hold: &'a Arc<Hold>,
        token: &'a str,
        lease: Duration,
        jobs: &'a Jobs,
    ) -> BoxFuture<'a, Result<Grant>> {
        self.acquire(hold, token, lease, jobs)
    }

    /// Owner-checked release that wakes waiters; true when `token` still held its grant.
    fn release<'a>(&'a self, hold: &'a Hold, token: &'a str) -> BoxFuture<'a, Result<bool>>;

    /// Renews a batch of leases, one outcome per lease in order. The caller bounds the whole call.
    fn renew<'a>(&'a self, batch: &'a [Renewal<'a>]) -> BoxFuture<'a, Result<Vec<Renewed>>>;

    /// Raises the fence counter of a lock to at least `at_least`; returns its value afterwards.
    fn raise_fence<'a>(&'a self, keys: &'a LockKeys, at_least: Fence) -> BoxFuture<'a, Result<Fence>>;

    /// Locks under `prefix` whose names match `pattern`, sorted by name.
    fn inspect<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> BoxFuture<'a, Result<Vec<LockInfo>>>;

    /// The wake-up hub that tells waiters about releases.
    fn wake(&self) -> &WakeHub;

    /// The channel of [`wake`](Self::wake) whose deliveries wake `hold`'s waiter: by default the
    /// hold's own ([`Hold::wake_channel`]: a release wakes the lock's waiters). A backend whose
    /// waiters each watch their own predecessor (ZooKeeper, etcd) delivers to that waiter alone,
    /// on [`Hold::waiter_channel`]: the others' predecessors are still there.
    fn wake_channel(&self, hold: &Hold) -> String {
        hold.wake_channel()
    }

    /// The Redis scripts this backend runs, if it keeps the primitives that need them (one Redis,
    /// a cluster). `None` for the others, which keep the plain lock only.
    fn redis_scripts(&self) -> Option<&dyn RedisScripts> {
        None
    }

    /// The current leader of the election `keys` names, as followers see it (see `election`):
    /// `None` while nobody leads. Each backend reads it where its campaign put it.
    fn leader<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<Option<Leader>>>;

    /// Arms a watch of the election `keys` names where the servers have one (ZooKeeper, etcd):
    /// once this returns, the inner future completes when the leader may have changed (or the
    /// watch broke). `None`: no watch here, and the observer polls. The default has none.
    fn watch_leader<'a>(&'a self, _keys: &'a LockKeys) -> BoxFuture<'a, Result<Option<BoxFuture<'static, ()>>>> {
        Box::pin(async { Ok(None) })
    }

    /// The lease a grant gets when `requested` is asked for: at most what the servers can vouch
    /// for (a ZooKeeper lock lives as long as its session, so at most the negotiated session
    /// timeout). The default grants what was asked.
    fn lease_for(&self, requested: Duration) -> Duration {
        requested
    }

    /// Whether an acquire of `hold` that gives up (its wait is over, or it was dropped) leaves
    /// something on the servers to undo: a fair lock's queue place, a waiter's node. The default:
    /// nothing.
    fn must_leave(&self, _hold: &Hold) -> bool {
        false
    }

    /// Undoes what a waiter that gave up left on the servers (see [`must_leave`](Self::must_leave)).
    fn leave<'a>(&'a self, _hold: &'a Hold) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

/// The error of a primitive the backend cannot keep.
pub(crate) fn unsupported(backend: BackendKind, what: &str) -> Error {
    Error::unsupported(format!("the {what} is not available on {backend}: it needs Redis (one server or a cluster)"))
}

/// Opens the backend that `url` names. Redis backends connect lazily; ZooKeeper, etcd and
/// PostgreSQL open their session (bounded by the command timeout).
/// `connections` is the builder's setting, `None` for the backend's default: one multiplexed
/// connection per Redis server (it batches the most commands per system call), two PostgreSQL
/// sessions (a session runs one statement at a time).
pub(crate) async fn open(url: &BackendUrl, config: &Config, connections: Option<usize>) -> Result<Arc<dyn Backend>> {
    let redis_connections = connections.unwrap_or(1);
    Ok(match url {
        BackendUrl::Redis(url) => Arc::new(redis::single::SingleRedis::open(url, config, redis_connections)?),
        BackendUrl::Cluster(nodes) => Arc::new(redis::cluster::RedisCluster::open(nodes, config)?),
        BackendUrl::Sentinel(url) => Arc::new(redis::sentinel::RedisSentinel::open(url, config, redis_connections)?),
        BackendUrl::Redlock(nodes) => Arc::new(redis::redlock::Redlock::open(nodes, config, redis_connections)?),
        #[cfg(feature = "zookeeper")]
        BackendUrl::ZooKeeper { servers, chroot, credentials } => {
            zookeeper::open(servers, chroot, credentials.as_ref(), config).await?
        }
        #[cfg(feature = "etcd")]
        BackendUrl::Etcd { endpoints, credentials } => etcd::open(endpoints, credentials.as_ref(), config).await?,
        #[cfg(feature = "postgres")]
        BackendUrl::Postgres { url, mode } => postgres::open(url, *mode, config, connections.unwrap_or(2)).await?,
        #[allow(unreachable_patterns)]
        other => {
            return Err(Error::new(
                crate::model::error::ErrorKind::Config,
                format!("{} URLs need lockkit's `{}` feature", other.scheme(), other.feature()),
            ));
        }
    })
}

/// Hands an owner-checked undo to the background if an acquire is dropped while its request may
/// have reached a server. The undo is prepared before the request is sent, on the same connection,
/// so that it reaches the server after the request.
///
/// Kept as the closure that makes the undo until it must run: nearly every acquire is answered
/// and disarms it, and an acquire's future then carries only what the undo captures, not the
/// undo's own future (a release's request and reply), which took the plain lock's first attempt
/// on one Redis past the allocator's small-block cache.
pub(crate) struct UndoOnCancel<'a, U: FnOnce() -> BoxFuture<'static, ()>> {
    jobs: &'a Jobs,
    armed: Option<U>,
}

impl<'a, U: FnOnce() -> BoxFuture<'static, ()>> UndoOnCancel<'a, U> {
    /// Arms `undo`; the future it makes runs in the background unless [`disarm`](Self::disarm)ed
    /// first.
    pub(crate) fn new(jobs: &'a Jobs, undo: U) -> Self {
        Self { jobs, armed: Some(undo) }
    }

    /// The reply was read: nothing to undo.
    pub(crate) fn disarm(&mut self) {
        self.armed = None;
    }
}

impl<U: FnOnce() -> BoxFuture<'static, ()>> Drop for UndoOnCancel<'_, U> {
    fn drop(&mut self) {
        if let Some(undo) = self.armed.take() {
            self.jobs.background(undo());
        }
    }
}
