//! One Redis server: every operation is one round trip on one of a few multiplexed connections
//! (a script, or for the plain lock's first attempt a pipeline of plain commands, see
//! `first_attempt`), and a batch of renewals is one pipeline.

use std::{sync::Arc, time::Duration};

use super::{
    RedisScripts,
    compare_delete::{self, CompareDelete},
    eviction,
    first_attempt::{self, FirstAttempt},
    holds, leader,
};
use crate::{
    backend::{
        Backend, BoxFuture,
        redis::{
            connections::Connections,
            scripts::{self, Call},
            view,
        },
    },
    jobs::Jobs,
    model::{
        backend_kind::BackendKind,
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

/// One Redis server.
#[derive(Debug)]
pub(crate) struct SingleRedis {
    conns: Connections,
    /// `host:port`, for messages (never the credentials).
    address: String,
    wake: WakeHub,
    /// The server's compare-and-delete command for plain releases, once probed (set to `None`:
    /// it has none, and releases run the script).
    compare_delete: tokio::sync::OnceCell<Option<CompareDelete>>,
}

impl SingleRedis {
    pub(crate) fn open(url: &str, config: &Config, connections: usize) -> Result<Self> {
        let client = client(url)?;
        Self::with_wake(url, config, connections, WakeHub::start(client, config.command_timeout))
    }

    /// The server's compare-and-delete command, probed once, by the first release that could use
    /// it (the releases that arrive meanwhile wait for that probe). A probe that fails is tried
    /// again by the next release if the connection failed (this one runs the script); a server
    /// that refuses `COMMAND` (an ACL) is taken to have neither command.
    async fn compare_delete(&self) -> Option<CompareDelete> {
        let probed = self
            .compare_delete
            .get_or_try_init(async || {
                match self.conns.run(async |conn| compare_delete::probe().query_async(conn).await).await {
                    Ok(reply) => Ok(compare_delete::parse(&reply)),
                    Err(e) if e.is_unavailable() => Err(e),
                    Err(_) => Ok(None),
                }
            })
            .await;
        probed.ok().copied().flatten()
    }

    /// The same server, with waiters woken through `wake`, a hub that outlives this server's
    /// connections (Sentinel: the hub follows the master from one server to the next).
    pub(crate) fn with_wake(url: &str, config: &Config, connections: usize, wake: WakeHub) -> Result<Self> {
        let conns = Connections::open(url, connections, config.command_timeout)?;
        let address = client(url)?.get_connection_info().addr().to_string();
        Ok(Self { conns, address, wake, compare_delete: tokio::sync::OnceCell::new() })
    }

    /// `host:port`, for messages (never the credentials).
    pub(crate) fn address(&self) -> &str {
        &self.address
    }
}

/// A redis-rs client for `url`; a malformed URL is a config error.
pub(crate) fn client(url: &str) -> Result<redis::Client> {
    redis::Client::open(url).map_err(|e| Error::new(ErrorKind::Config, "invalid redis url").with_source(e))
}

impl Backend for SingleRedis {
    fn kind(&self) -> BackendKind {
        BackendKind::Redis
    }

    fn ping(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { self.conns.run(async |conn| redis::cmd("PING").query_async::<()>(conn).await).await })
    }

    fn check_eviction(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let mut lane = self.conns.checkout().await?;
            eviction::check(&self.address, eviction::command().query_async(&mut lane.conn).await)
        })
    }

    fn acquire<'a>(
        &'a self,
        hold: &'a Arc<Hold>,
        token: &'a str,
        lease: Duration,
        jobs: &'a Jobs,
    ) -> BoxFuture<'a, Result<Grant>> {
        Box::pin(async move {
            // Connecting is bounded by the connection timeout, the script by the response timeout.
            let lane = self.conns.checkout().await?;
            let call = holds::acquire(hold, token, lease);
            let mut undo = super::UndoOnDrop::arm(jobs, lane.conn, hold, token);
            let reply = scripts::acquire(undo.conn(), &call).await.map_err(Into::into);
            self.conns.report(lane.index, &reply);
            // An error leaves `undo` armed: the script may have run although its answer was lost.
            let reply = reply?;
            undo.disarm();
            Ok(reply.into())
        })
    }

    fn acquire_first<'a>(
        &'a self,
        hold: &'a Arc<Hold>,
        token: &'a str,
        lease: Duration,
        jobs: &'a Jobs,
    ) -> BoxFuture<'a, Result<Grant>> {
        if !first_attempt::applies(hold) {
            return self.acquire(hold, token, lease, jobs);
        }
        Box::pin(async move {
            let lane = self.conns.checkout().await?;
            let mut undo = super::UndoOnDrop::arm(jobs, lane.conn, hold, token);
            let reply = first_attempt::attempt(undo.conn(), &hold.keys, token, lease).await.map_err(Error::from);
            self.conns.report(lane.index, &reply);
            // An error leaves `undo` armed: the pipeline may have run although its answer was
            // lost.
            let reply = reply?;
            undo.disarm();
            Ok(match reply {
                FirstAttempt::Granted(fence) => Grant::Granted(Fence::new(fence)),
                FirstAttempt::Held => Grant::Held(None),
            })
        })
    }

    fn release<'a>(&'a self, hold: &'a Hold, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            if holds::releases_by_compare_and_delete(hold)
                && let Some(how) = self.compare_delete().await
            {
                return self.conns.run(async |conn| compare_delete::release(conn, how, &hold.keys, token).await).await;
            }
            let call = holds::release(hold, token);
            self.conns.run(async |conn| scripts::owner_checked(conn, &call).await).await
        })
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
        Box::pin(async move {
            let calls: Vec<Call<'_>> = batch.iter().map(|r| holds::extend(r.hold, r.token, r.lease)).collect();
            let replies = self.conns.run(async |conn| scripts::extend_pipelined(conn, &calls).await).await?;
            Ok(replies.into_iter().map(|ours| if ours { Renewed::Extended } else { Renewed::Gone }).collect())
        })
    }

    fn raise_fence<'a>(&'a self, keys: &'a LockKeys, at_least: Fence) -> BoxFuture<'a, Result<Fence>> {
        Box::pin(async move {
            let value = self.conns.run(async |conn| scripts::raise_fence(conn, keys, at_least.get()).await).await?;
            Ok(Fence::new(value))
        })
    }

    fn inspect<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> BoxFuture<'a, Result<Vec<LockInfo>>> {
        Box::pin(async move {
            let names = self.conns.run(async |conn| view::scan_names(conn, prefix, pattern).await).await?;
            let mut infos = Vec::with_capacity(names.len());
            for name in names {
                let keys = LockKeys::new(prefix, &name)?;
                let view = self.conns.run(async |conn| view::read_view(conn, &keys).await).await?;
                infos.push(view.into_info(name));
            }
            Ok(infos)
        })
    }

    fn wake(&self) -> &WakeHub {
        &self.wake
    }

    fn leader<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<Option<Leader>>> {
        Box::pin(async move { leader::parse_read(self.run(&leader::read(keys)).await?) })
    }
}

impl RedisScripts for SingleRedis {
    fn run<'a>(&'a self, call: &'a Call<'_>) -> BoxFuture<'a, Result<redis::Value>> {
        Box::pin(self.conns.run(async move |conn| call.invoke(conn).await))
    }
}
