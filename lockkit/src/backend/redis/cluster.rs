//! Redis Cluster: the same scripts as on one Redis, routed by the lock's hash tag, so every key
//! of a lock sits in one slot and different locks spread over the masters.
//!
//! - redis-rs' cluster connection follows `MOVED` and `ASK` redirections (slot migrations,
//!   failovers) and refreshes its slot map by itself.
//! - Renewals of a batch go out concurrently, one script each, as their locks live on different
//!   masters; the connection multiplexes them.
//! - Wake-ups use classic pub/sub on one seed node: a cluster propagates every `PUBLISH` to all
//!   of its nodes, so a release on any master reaches it. If that node is down, waiters poll.
//! - What a failover with asynchronous replication can do: a grant acknowledged by a master that
//!   dies before its replica received it is forgotten by the promoted replica, which may grant the
//!   lock again. Its fence counter may also be behind, so a fence can repeat. The store's fence
//!   check refuses only writes with a fence *below* the one it has; re-seed the counter with
//!   [`LockClient::ensure_fence_at_least`](crate::LockClient::ensure_fence_at_least) after a
//!   failover, from the highest fence the store accepted, as after any Redis data loss.

use std::{sync::Arc, time::Duration};

use futures_util::future::join_all;
use redis::{
    cluster::ClusterClient,
    cluster_async::ClusterConnection,
    cluster_routing::{RoutingInfo, SingleNodeRoutingInfo},
};
use tokio::sync::OnceCell;

use super::{RedisScripts, eviction, holds, leader};
use crate::{
    backend::{
        Backend, BoxFuture,
        redis::{
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

/// A Redis Cluster, reached through its seed nodes.
pub(crate) struct RedisCluster {
    client: ClusterClient,
    /// Connected on first use, and again after a failed attempt.
    conn: OnceCell<ClusterConnection>,
    command_timeout: Duration,
    wake: WakeHub,
}

impl std::fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCluster").field("connected", &self.conn.initialized()).finish_non_exhaustive()
    }
}

impl RedisCluster {
    pub(crate) fn open(seeds: &[String], config: &Config) -> Result<Self> {
        let invalid = |e| Error::new(ErrorKind::Config, "invalid redis cluster url").with_source(e);
        let client = ClusterClient::builder(seeds.iter().map(String::as_str))
            .connection_timeout(config.command_timeout)
            .response_timeout(config.command_timeout)
            .build()
            .map_err(invalid)?;
        let wake = WakeHub::start(redis::Client::open(seeds[0].as_str()).map_err(invalid)?, config.command_timeout);
        Ok(Self { client, conn: OnceCell::new(), command_timeout: config.command_timeout, wake })
    }

    /// The cluster connection (a cheap clone), connecting first if needed.
    async fn conn(&self) -> Result<ClusterConnection> {
        let connect = async {
            tokio::time::timeout(self.command_timeout, self.client.get_async_connection())
                .await
                .map_err(|_| Error::unanswered(BackendKind::RedisCluster, "a connection", self.command_timeout))?
                .map_err(Error::from)
        };
        Ok(self.conn.get_or_try_init(|| connect).await?.clone())
    }

    /// The masters' addresses, from `CLUSTER NODES` on any node.
    async fn masters(&self, conn: &mut ClusterConnection) -> Result<Vec<(String, u16)>> {
        let nodes = conn
            .route_command(
                redis::cmd("CLUSTER").arg("NODES").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await?;
        let text: String = redis::from_redis_value(nodes)?;
        Ok(text.lines().filter_map(master_address).collect())
    }
}

/// The address of a healthy master in one line of `CLUSTER NODES`
/// (`id host:port@bus flags master ping pong epoch state slots...`).
fn master_address(line: &str) -> Option<(String, u16)> {
    let mut fields = line.split(' ');
    let address = fields.nth(1)?;
    let flags = fields.next()?;
    if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
        return None;
    }
    let (host, port) = address.split('@').next()?.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

impl Backend for RedisCluster {
    fn kind(&self) -> BackendKind {
        BackendKind::RedisCluster
    }

    fn ping(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let mut conn = self.conn().await?;
            let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
            conn.route_command(redis::cmd("PING").clone(), route).await?;
            Ok(())
        })
    }

    fn check_eviction(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let mut conn = self.conn().await?;
            let masters = match self.masters(&mut conn).await {
                Ok(masters) => masters,
                Err(e) if e.is_unavailable() => return Err(e),
                // CLUSTER NODES refused by an ACL: no way to reach each master by address.
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list the cluster's masters to read their maxmemory-policy; \
                                                lockkit is safe only under noeviction");
                    return Ok(());
                }
            };
            for (host, port) in masters {
                let server = format!("{host}:{port}");
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                eviction::check(&server, conn.route_command(eviction::command(), route).await)?;
            }
            Ok(())
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
            // The same connection routes the undo to the same master, after the request.
            let call = holds::acquire(hold, token, lease);
            let mut undo = super::UndoOnDrop::arm(jobs, self.conn().await?, hold, token);
            let reply = scripts::acquire(undo.conn(), &call).await?;
            undo.disarm();
            Ok(reply.into())
        })
    }

    fn release<'a>(&'a self, hold: &'a Hold, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(
            async move { Ok(scripts::owner_checked(&mut self.conn().await?, &holds::release(hold, token)).await?) },
        )
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
            let conn = self.conn().await?;
            let renewals = batch.iter().map(|r| {
                let mut conn = conn.clone();
                async move {
                    match scripts::owner_checked(&mut conn, &holds::extend(r.hold, r.token, r.lease)).await {
                        Ok(true) => Renewed::Extended,
                        Ok(false) => Renewed::Gone,
                        Err(_) => Renewed::Unanswered,
                    }
                }
            });
            Ok(join_all(renewals).await)
        })
    }

    fn raise_fence<'a>(&'a self, keys: &'a LockKeys, at_least: Fence) -> BoxFuture<'a, Result<Fence>> {
        Box::pin(
            async move { Ok(Fence::new(scripts::raise_fence(&mut self.conn().await?, keys, at_least.get()).await?)) },
        )
    }

    fn inspect<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> BoxFuture<'a, Result<Vec<LockInfo>>> {
        Box::pin(async move {
            let mut conn = self.conn().await?;
            let mut names = std::collections::BTreeSet::new();
            for (host, port) in self.masters(&mut conn).await? {
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                let mut cursor = 0u64;
                loop {
                    let mut scan = redis::cmd("SCAN");
                    scan.arg(cursor).arg("MATCH").arg(format!("{{{prefix}:{pattern}}}*")).arg("COUNT").arg(1000);
                    let (next, keys): (u64, Vec<String>) =
                        redis::from_redis_value(conn.route_command(scan, route.clone()).await?)?;
                    names.extend(keys.iter().filter_map(|key| LockKeys::name_of(prefix, key)).map(str::to_owned));
                    if next == 0 {
                        break;
                    }
                    cursor = next;
                }
            }
            let mut infos = Vec::with_capacity(names.len());
            for name in names {
                let keys = LockKeys::new(prefix, &name)?;
                infos.push(view::read_view(&mut conn, &keys).await?.into_info(name));
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

impl RedisScripts for RedisCluster {
    fn run<'a>(&'a self, call: &'a Call<'_>) -> BoxFuture<'a, Result<redis::Value>> {
        Box::pin(async move { Ok(call.invoke(&mut self.conn().await?).await?) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_masters_are_read_from_cluster_nodes() {
        let text = "a 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460\n\
                    b 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922\n\
                    c 127.0.0.1:7003@17003 master,fail - 0 0 3 disconnected\n\
                    d 127.0.0.1:7004@17004 slave a 0 0 1 connected";
        let masters: Vec<_> = text.lines().filter_map(master_address).collect();
        assert_eq!(masters, vec![("127.0.0.1".to_owned(), 7001), ("127.0.0.1".to_owned(), 7002)]);
    }
}
