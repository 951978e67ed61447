//! [`LockClient`]: the entry point, a façade over the shared [`Core`]: the builder validates the
//! settings, connects, and starts the watchdog and wake-up tasks. Cheap to clone and meant to be
//! shared by a whole service.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::mpsc;

use crate::{
    acquire::Acquire,
    backend::{self, BackendUrl},
    core::Core,
    guard::LockGuard,
    jobs::Jobs,
    model::{
        backend_kind::{BackendKind, Capability},
        controls::{Controls, Unprotected},
        error::{Error, ErrorKind, Result},
        fence::Fence,
        keys::LockKeys,
        settings::Config,
    },
    registry::Registry,
    watchdog,
};

/// Lease used when none is given: the watchdog renews it every third of it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// A handle to lockkit on one deployment, chosen by the URL: one Redis, a Redis Cluster, Redlock
/// over independent masters, ZooKeeper, etcd or PostgreSQL (the last three behind features).
/// Clone it freely: clones share the connections, the wake-up connection and the watchdog.
///
/// ```no_run
/// # async fn demo() -> lockkit::Result<()> {
/// use std::time::Duration;
/// let client = lockkit::LockClient::connect("redis://127.0.0.1:6390").await?;
/// let guard = client.lock("inventory:42", Duration::from_secs(2)).await?;
/// println!("fence {}", guard.fence());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    core: Arc<Core>,
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("backend", &self.core.backend.kind())
            .field("config", &self.core.config)
            .finish_non_exhaustive()
    }
}

impl LockClient {
    /// Connects with default settings. The URL picks the backend:
    /// - `redis://[user:password@]host:port[/db]`: one Redis (`rediss://` over TLS with the `tls`
    ///   feature);
    /// - `redis+cluster://[user:password@]host:port,host:port,...`: a Redis Cluster, from its seed
    ///   nodes;
    /// - `redlock://[user:password@]host:port,...`: Redlock over independent masters (at least 3;
    ///   a majority must agree);
    /// - `redis+sentinel://[user:password@]host:port,host:port,.../master-name[/db]`: the master
    ///   that these Sentinels name, followed through failovers (the userinfo is the master's; the
    ///   Sentinels' own AUTH comes from `?sentinel_username=..&sentinel_password=..`);
    /// - `zk://`, `etcd://`, `postgres://`, `postgres+advisory://` with the features `zookeeper`,
    ///   `etcd` and `postgres` (see the crate's backend table).
    ///
    /// A Redis server whose `maxmemory-policy` is not `noeviction` is refused unless the URL says
    /// `?allow_eviction=true` (see [`LockClientBuilder::allow_eviction`]).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// Starts configuring a client.
    pub fn builder(url: impl Into<String>) -> LockClientBuilder {
        LockClientBuilder {
            url: url.into(),
            config: Config {
                prefix: "lockkit".into(),
                default_lease: DEFAULT_LEASE,
                command_timeout: Duration::from_secs(2),
                wake_safety_interval: Duration::from_secs(5),
                node_timeout: Duration::from_millis(100),
                allow_eviction: false,
                controls: Controls::default(),
            },
            connections: None,
        }
    }

    /// Tries once; `Ok(None)` when someone else holds the lock. The lease defaults to 30 s,
    /// renewed by the watchdog until the guard is released.
    pub async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        match self.acquire(name).await {
            Ok(guard) => Ok(Some(guard)),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Waits up to `wait` for the lock; fails with [`Error::is_timeout`] if it stays held. The
    /// lease defaults to 30 s, renewed by the watchdog until the guard is released.
    pub async fn lock(&self, name: &str, wait: Duration) -> Result<LockGuard> {
        self.acquire(name).wait(wait).await
    }

    /// Full control: `client.acquire("name").lease(d).wait(w).await`. Without `.lease(..)` the
    /// watchdog keeps the lease alive; with it the lease simply ends after `d` (and the guard
    /// reports it lost then). Without `.wait(..)` it tries once.
    pub fn acquire<'a>(&'a self, name: &'a str) -> Acquire<'a> {
        Acquire::new(&self.core, name)
    }

    /// Raises the fence counter of `name` to at least `at_least` (an atomic max; on Redlock on every
    /// node) and returns its value afterwards. Use it after Redis lost its data or failed over:
    /// seed the counter from the highest fence your store accepted, so new grants outrank every
    /// write already made.
    pub async fn ensure_fence_at_least(&self, name: &str, at_least: Fence) -> Result<Fence> {
        let keys = LockKeys::new(&self.core.config.prefix, name)?;
        self.core.backend.raise_fence(&keys, at_least).await
    }

    /// Waits, at most `within`, until the work this client does in the background has finished:
    /// releases of guards dropped without `release()`, undoing cancelled acquires, waiters
    /// leaving their place in a queue (fair lock, ZooKeeper, etcd). Call it before the process
    /// exits, or that work is cut short and what it would have removed stays on the servers until
    /// its lease or session ends. Returns whether everything finished in time.
    pub async fn flush(&self, within: Duration) -> bool {
        self.core.jobs.flush(within).await
    }

    /// Which backend the URL chose.
    pub fn backend(&self) -> BackendKind {
        self.core.backend.kind()
    }

    /// Whether this client's backend keeps `capability` (the plain fenced lock is kept by all).
    /// What it does not keep fails with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported)
    /// before any request.
    ///
    /// ```no_run
    /// # async fn demo(client: lockkit::LockClient) -> lockkit::Result<()> {
    /// use lockkit::Capability;
    /// if client.supports(Capability::Fair) {
    ///     client.fair("printer").await?.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn supports(&self, capability: Capability) -> bool {
        self.core.backend.kind().supports(capability)
    }

    /// Number of leases this client currently holds (watched or not yet released).
    pub fn held_leases(&self) -> usize {
        self.core.registry.len()
    }

    /// The key prefix (default `lockkit`): lock `NAME` lives at `{prefix:NAME}`.
    pub fn prefix(&self) -> &str {
        &self.core.config.prefix
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }
}

/// Configures a [`LockClient`]; finish with [`connect`](LockClientBuilder::connect).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until you call connect()"]
pub struct LockClientBuilder {
    url: String,
    config: Config,
    /// `None`: the backend's own default (see [`LockClientBuilder::connections`]).
    connections: Option<usize>,
}

impl LockClientBuilder {
    /// Key prefix (default `lockkit`). Must not contain `{` or `}`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.prefix = prefix.into();
        self
    }

    /// Lease used when an acquire does not give one, renewed by the watchdog (default 30 s).
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.config.default_lease = lease;
        self
    }

    /// Longest wait for any single Redis answer (default 2 s); past it the call fails as
    /// unavailable (retryable).
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.config.command_timeout = timeout;
        self
    }

    /// Longest a waiter sleeps between attempts while wake-ups are flowing (default 5 s). Only
    /// matters if a release message is lost; waits are also capped by the holder's remaining TTL.
    pub fn wake_safety_interval(mut self, interval: Duration) -> Self {
        self.config.wake_safety_interval = interval;
        self
    }

    /// Connections that operations are spread over: multiplexed connections to each Redis server
    /// (default 1), or PostgreSQL sessions (default 2). A multiplexed connection pipelines any
    /// number of concurrent operations, so one is enough for thousands of tasks, and more
    /// connections mean smaller batches per system call on both ends. Measured in December 2026
    /// on 2 cores (`lockctl bench`, plain lock, 16 and 64 tasks, against one Redis 7.0): one
    /// connection cost Redis 10-17 µs of CPU per pair where two cost 15-22, at as many pairs/s
    /// or more. (Redis Cluster keeps one connection per master whatever this says.)
    pub fn connections(mut self, connections: usize) -> Self {
        self.connections = Some(connections.max(1));
        self
    }

    /// Redlock only: longest wait for one node's answer to an acquire or a renewal (default
    /// 100 ms, and never more than a tenth of the lease). A node slower than this counts as absent
    /// for that operation. Releases and fence raises wait up to the command timeout.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.config.node_timeout = timeout;
        self
    }

    /// Redis backends: connect even if a server's `maxmemory-policy` is not `noeviction` (default
    /// `false`; the URL parameter `allow_eviction=true` does the same). Under `allkeys-*` Redis may
    /// evict a fence counter, which never expires, and fences start again from 1; under
    /// `volatile-*` it may evict a held lock. Without this, [`connect`](Self::connect) refuses
    /// such a server with [`ErrorKind::Config`]. A server that refuses `CONFIG GET` (ACL, renamed
    /// command) is not refused: lockkit logs a warning and connects.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.config.allow_eviction = allow;
        self
    }

    /// **Tests only**: switches off one protection, so that a test can show it is needed (the
    /// same test must then fail). Never use it in an application.
    #[doc(hidden)]
    pub fn unprotected(mut self, protection: Unprotected) -> Self {
        self.config.controls.remove(protection);
        self
    }

    /// Connects, checks that the servers answer (on Redlock: a majority of them) and, on Redis,
    /// that they do not evict lock keys (see [`allow_eviction`](Self::allow_eviction)), and starts
    /// the watchdog and wake-up tasks. Must be called inside a tokio runtime.
    pub async fn connect(mut self) -> Result<LockClient> {
        let config_error = |what: String| Error::new(ErrorKind::Config, what);
        let cfg = &self.config;
        if cfg.prefix.is_empty() || cfg.prefix.contains(['{', '}']) {
            return Err(config_error(format!("prefix {:?} must be non-empty without '{{' or '}}'", cfg.prefix)));
        }
        if cfg.default_lease < Duration::from_millis(10) || cfg.command_timeout.is_zero() || cfg.node_timeout.is_zero()
        {
            return Err(config_error(
                "default lease must be at least 10 ms and the command and node timeouts positive".into(),
            ));
        }
        let (url, url_allows_eviction) = backend::take_allow_eviction(&self.url)?;
        self.config.allow_eviction |= url_allows_eviction;
        let url = BackendUrl::parse(&url)?;
        let backend = backend::open(&url, &self.config, self.connections).await?;
        let (jobs, jobs_rx) = mpsc::unbounded_channel();
        let core = Arc::new(Core {
            backend,
            config: self.config,
            registry: Arc::new(Registry::default()),
            jobs: Jobs::new(jobs),
        });
        let started = Instant::now();
        core.backend.ping().await?;
        if !core.config.allow_eviction {
            core.backend.check_eviction().await?;
        }
        tracing::debug!(elapsed = ?started.elapsed(), prefix = %core.config.prefix, backend = %core.backend.kind(), "lockkit connected");
        watchdog::spawn(Arc::downgrade(&core), jobs_rx);
        Ok(LockClient { core })
    }
}
