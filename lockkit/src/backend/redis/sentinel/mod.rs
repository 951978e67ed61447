//! Redis Sentinel (`redis+sentinel://host:port,host:port/master-name`): one Redis master found
//! through its Sentinels, and followed through failovers.
//!
//! Everything a lock does runs on the master exactly as on one Redis (the `single` backend,
//! wrapped, not copied). What this file adds is where "the master" is:
//! - at the first operation, the Sentinels are asked (`discovery`) and the server they name must
//!   confirm with `ROLE` that it is the master;
//! - the client moves to the new master on a broken connection, on a write refused with
//!   `READONLY` (the old master was demoted under us), and on the Sentinels' `+switch-master`
//!   (`switch_watch`); the wake-up pub/sub moves with it, so that a waiter blocked before a
//!   failover is woken by a release on the new master;
//! - fences granted by a promoted master start above every fence of the masters before it
//!   (`fence_floor`).
//!
//! What a failover does to a held lock, and what lockkit does about it: `lockkit::guide::sentinel`.

mod discovery;
mod fence_floor;
mod switch_watch;

use std::{
    future::Future,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use tokio_util::sync::{CancellationToken, DropGuard};

use self::fence_floor::FenceFloor;
use super::{RedisScripts, holds, scripts::Call, single::SingleRedis};
use crate::{
    backend::{Backend, BoxFuture, url::SentinelUrl},
    jobs::Jobs,
    model::{
        backend_kind::BackendKind,
        controls::Unprotected,
        error::{Error, ErrorKind, Result},
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

/// A Redis master found and followed through its Sentinels.
#[derive(Debug)]
pub(crate) struct RedisSentinel {
    shared: Arc<Shared>,
    /// Stops the `+switch-master` listener when the client goes.
    _watch: DropGuard,
}

/// What the backend, its wake-up hub and its `+switch-master` listener share.
#[derive(Debug)]
struct Shared {
    url: SentinelUrl,
    config: Config,
    connections: usize,
    /// One hub for the client's life, reconnected to each new master (waiters keep their
    /// subscriptions across a failover).
    wake: WakeHub,
    /// The master in use; `None` once it failed us, until the Sentinels are asked again.
    current: Mutex<Option<Arc<Master>>>,
    /// The address of the last master found, to tell a move from a reconnection.
    last_address: Mutex<Option<String>>,
    /// One discovery at a time: the operations that found no master wait for it.
    discovering: tokio::sync::Mutex<()>,
}

/// One master, as one Sentinel answer named it.
#[derive(Debug)]
struct Master {
    redis: SingleRedis,
    /// For the wake-up hub's pub/sub connection.
    client: redis::Client,
    floor: FenceFloor,
}

impl RedisSentinel {
    /// One attempt on the current master (its first, or a waiter's), after seeding the fence
    /// floor there if this master has not been seeded for the name yet. Not retried here: the
    /// acquire loop retries within the caller's wait, undoing what a lost answer may have granted.
    fn attempt<'a>(
        &'a self,
        hold: &'a Arc<Hold>,
        token: &'a str,
        lease: Duration,
        jobs: &'a Jobs,
        first: bool,
    ) -> BoxFuture<'a, Result<Grant>> {
        Box::pin(self.on_master(false, move |master: Arc<Master>| async move {
            let name = &hold.keys.name;
            if let Some(floor) = master.floor.pending(name)
                && self.shared.config.controls.keeps(Unprotected::SentinelFenceFloor)
            {
                master.redis.raise_fence(&hold.keys, floor).await?;
                master.floor.seeded(name);
            }
            if first {
                master.redis.acquire_first(hold, token, lease, jobs).await
            } else {
                master.redis.acquire(hold, token, lease, jobs).await
            }
        }))
    }

    /// Connects lazily: the Sentinels are first asked by the first operation (the client's ping).
    pub(crate) fn open(url: &SentinelUrl, config: &Config, connections: usize) -> Result<Self> {
        for sentinel in &url.sentinels {
            super::single::client(sentinel)?;
        }
        let timeout = config.command_timeout;
        let shared = Arc::new_cyclic(|weak: &Weak<Shared>| {
            let weak = weak.clone();
            let wake = WakeHub::start_with(
                Arc::new(move || {
                    let weak = weak.clone();
                    Box::pin(async move {
                        let gone = || redis::RedisError::from((redis::ErrorKind::Client, "no master", String::new()));
                        let shared = weak.upgrade().ok_or_else(gone)?;
                        let master = shared.master().await.map_err(|_| gone())?;
                        let pubsub = master.client.get_async_pubsub().await;
                        if pubsub.is_err() {
                            shared.failed(&master);
                        }
                        pubsub
                    })
                }),
                timeout,
            );
            Shared {
                url: url.clone(),
                config: config.clone(),
                connections,
                wake,
                current: Mutex::new(None),
                last_address: Mutex::new(None),
                discovering: tokio::sync::Mutex::new(()),
            }
        });
        let stop = CancellationToken::new();
        let weak = Arc::downgrade(&shared);
        let listen = switch_watch::watch(url.sentinels.clone(), url.service.clone(), timeout, move || {
            let weak = weak.clone();
            async move {
                if let Some(shared) = weak.upgrade() {
                    shared.switched().await;
                }
            }
        });
        let stopped = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = stopped.cancelled() => {}
                () = listen => {}
            }
        });
        Ok(Self { shared, _watch: stop.drop_guard() })
    }

    /// Runs `op` on the master. If it failed in a way that says the master moved or died, the
    /// master is forgotten (the next operation asks the Sentinels) and, when `retry` (`op` is
    /// idempotent), `op` runs once more on the master the Sentinels name now.
    async fn on_master<T, F>(&self, retry: bool, op: impl Fn(Arc<Master>) -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let master = self.shared.master().await?;
        match self.shared.judge(&master, op(master.clone()).await) {
            Err(e) if retry && e.is_unavailable() => {
                let master = self.shared.master().await?;
                self.shared.judge(&master, op(master.clone()).await)
            }
            outcome => outcome,
        }
    }
}

impl Shared {
    /// The master in use, asking the Sentinels if there is none.
    async fn master(&self) -> Result<Arc<Master>> {
        if let Some(master) = self.current.lock().unwrap().clone() {
            return Ok(master);
        }
        let _one = self.discovering.lock().await;
        if let Some(master) = self.current.lock().unwrap().clone() {
            return Ok(master);
        }
        let found = discovery::find_master(&self.url, self.config.command_timeout).await?;
        let master = Arc::new(Master {
            redis: SingleRedis::with_wake(&found.url, &self.config, self.connections, self.wake.clone())?,
            client: super::single::client(&found.url)?,
            floor: FenceFloor::of_epoch(found.epoch),
        });
        tracing::debug!(service = %self.url.service, master = %found.address, epoch = found.epoch, "lockkit found the master");
        *self.current.lock().unwrap() = Some(master.clone());
        let previous = self.last_address.lock().unwrap().replace(found.address.clone());
        if previous.is_some_and(|previous| previous != found.address) {
            tracing::info!(service = %self.url.service, master = %found.address, "lockkit follows the master to a new server");
            // The wake-up connection may still be on the server we left (which may live on as a
            // replica): move it too. Waiters poll until it is back, and are woken to re-check.
            self.wake.reconnect();
        }
        Ok(master)
    }

    /// `master` failed us: forget it, unless another operation already moved on.
    fn failed(&self, master: &Arc<Master>) {
        let mut current = self.current.lock().unwrap();
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, master)) {
            *current = None;
        }
    }

    /// The Sentinels announced a new master: move now.
    async fn switched(&self) {
        tracing::info!(service = %self.url.service, "lockkit heard +switch-master; moving to the new master");
        self.current.lock().unwrap().take();
        if let Err(e) = self.master().await {
            tracing::debug!(error = %e, "the new master is not reachable yet; the next operation asks again");
        }
    }

    /// Passes on `outcome` of an operation on `master`, forgetting the master if the outcome says
    /// it is gone or demoted. A demoted master's `READONLY` becomes unavailable (retryable): the
    /// operation can succeed on the new master.
    fn judge<T>(&self, master: &Arc<Master>, outcome: Result<T>) -> Result<T> {
        match outcome {
            Err(e) if e.is_unavailable() => {
                self.failed(master);
                Err(e)
            }
            Err(e) if is_read_only(&e) => {
                self.failed(master);
                Err(Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "redis at {} is no longer the master of {:?} (READONLY); following the failover",
                        master.redis.address(),
                        self.url.service
                    ),
                )
                .with_source(e))
            }
            outcome => outcome,
        }
    }
}

/// Whether Redis refused a write because the server is a replica (`READONLY`, also from inside a
/// script).
fn is_read_only(e: &Error) -> bool {
    std::error::Error::source(e).and_then(|s| s.downcast_ref::<redis::RedisError>()).is_some_and(|e| {
        matches!(e.kind(), redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly))
            || e.to_string().contains("READONLY")
    })
}

impl Backend for RedisSentinel {
    fn kind(&self) -> BackendKind {
        BackendKind::RedisSentinel
    }

    fn ping(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.on_master(true, move |master| async move { master.redis.ping().await }))
    }

    fn check_eviction(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.on_master(true, move |master| async move { master.redis.check_eviction().await }))
    }

    fn acquire<'a>(
        &'a self,
        hold: &'a Arc<Hold>,
        token: &'a str,
        lease: Duration,
        jobs: &'a Jobs,
    ) -> BoxFuture<'a, Result<Grant>> {
        self.attempt(hold, token, lease, jobs, false)
    }

    fn acquire_first<'a>(
        &'a self,
        hold: &'a Arc<Hold>,
        token: &'a str,
        lease: Duration,
        jobs: &'a Jobs,
    ) -> BoxFuture<'a, Result<Grant>> {
        self.attempt(hold, token, lease, jobs, true)
    }

    fn release<'a>(&'a self, hold: &'a Hold, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.on_master(true, move |master| async move { master.redis.release(hold, token).await }))
    }

    fn redis_scripts(&self) -> Option<&dyn RedisScripts> {
        Some(self)
    }

    fn must_leave(&self, hold: &Hold) -> bool {
        holds::leave(hold).is_some()
    }

    fn leave<'a>(&'a self, hold: &'a Hold) -> BoxFuture<'a, Result<()>> {
        super::leave(self, hold)
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal<'a>]) -> BoxFuture<'a, Result<Vec<Renewed>>> {
        Box::pin(self.on_master(true, move |master| async move { master.redis.renew(batch).await }))
    }

    fn raise_fence<'a>(&'a self, keys: &'a LockKeys, at_least: Fence) -> BoxFuture<'a, Result<Fence>> {
        Box::pin(self.on_master(true, move |master| async move { master.redis.raise_fence(keys, at_least).await }))
    }

    fn inspect<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> BoxFuture<'a, Result<Vec<LockInfo>>> {
        Box::pin(self.on_master(true, move |master| async move { master.redis.inspect(prefix, pattern).await }))
    }

    fn leader<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<Option<Leader>>> {
        Box::pin(self.on_master(true, move |master| async move { master.redis.leader(keys).await }))
    }

    fn wake(&self) -> &WakeHub {
        &self.shared.wake
    }
}

impl RedisScripts for RedisSentinel {
    fn run<'a>(&'a self, call: &'a Call<'_>) -> BoxFuture<'a, Result<redis::Value>> {
        Box::pin(self.on_master(false, move |master| async move { master.redis.run(call).await }))
    }
}
