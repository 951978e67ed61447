//! Redlock over N independent Redis masters, with fencing tokens that Redlock alone cannot give.
//!
//! - **Acquire**: the acquire script on every node at once, each answer bounded by the node
//!   timeout (small against the lease). The lock is ours when a majority (N/2+1) granted it within
//!   the lease's validity: lease - elapsed - drift (1% of the lease + 2 ms), which the caller
//!   checks against the lease clock. A failed attempt is released on every node before it returns.
//! - **Fence**: each node counts its own grants, so their counters differ. The grant's fence is the
//!   largest counter of the granting majority, written back (an atomic max) to every node that
//!   answered before the grant is handed out. Any later majority shares a node with this one, so
//!   its largest counter, after its own increment, is larger.
//! - **Renewal** needs a majority to confirm; the lease is lost when a majority no longer has it.
//! - **Release** is owner-checked on every node.
//! - **Primitives**: only the plain lock (with or without a lock-delay, on each node) runs here;
//!   the reentrant, fair, read-write and semaphore primitives and fence retirement are refused
//!   with an `Unsupported` error, since their counts, queues and permits cannot be agreed by a vote.
//!
//! What this does not guarantee, honestly:
//! - A node that restarts without persistence forgets the keys and the counters it had. One such
//!   node among five is covered: the other four still carry the written-back fence, and a majority
//!   of them still hold the lock. If restarts leave a majority without the latest state, two
//!   holders and a repeated fence are possible. Run nodes with `appendfsync always`, or keep a
//!   restarted node out for one lease (antirez's delayed restart).
//! - Clock jumps on a node (not the client) shorten or lengthen its expiry: validity assumes
//!   clocks that drift by at most 1%.
//! - A holder paused past its lease cannot be stopped by any lock. The store's fence check is what
//!   keeps the data safe: it refuses the paused holder's writes once a newer fence was used.

use std::{sync::Arc, time::Duration};

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;

use super::{eviction, holds, leader};
use crate::{
    backend::{
        Backend, BoxFuture, UndoOnCancel,
        redis::{
            connections::Connections,
            scripts::{self, AcquireReply, Call},
            view::{self, NodeView},
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
        lock_info::{LockInfo, LockKind},
        settings::Config,
    },
    wake::WakeHub,
};

/// Independent masters and the majority that must agree.
#[derive(Debug)]
pub(crate) struct Redlock {
    nodes: Vec<Node>,
    quorum: usize,
    node_timeout: Duration,
    /// Bound of the operations whose answer is not raced against a lease (release, fence raise,
    /// ping): the client's command timeout, so that a node slow under load still takes part.
    command_timeout: Duration,
    /// Wake-ups from the first node: a release publishes on every node. While that node is down,
    /// waiters poll.
    wake: WakeHub,
}

#[derive(Debug)]
struct Node {
    /// `host:port`, for logs (never the credentials).
    address: String,
    conns: Connections,
}

impl Redlock {
    pub(crate) fn open(urls: &[String], config: &Config, connections: usize) -> Result<Self> {
        let nodes = urls
            .iter()
            .map(|url| {
                let address = url.rsplit('@').next().unwrap_or(url).rsplit("://").next().unwrap_or(url).to_owned();
                Ok(Node { address, conns: Connections::open(url, connections, config.command_timeout)? })
            })
            .collect::<Result<Vec<_>>>()?;
        let first = redis::Client::open(urls[0].as_str())
            .map_err(|e| Error::new(ErrorKind::Config, "invalid redlock node url").with_source(e))?;
        Ok(Self {
            quorum: nodes.len() / 2 + 1,
            nodes,
            node_timeout: config.node_timeout.min(config.command_timeout),
            command_timeout: config.command_timeout,
            wake: WakeHub::start(first, config.command_timeout),
        })
    }

    /// How long to wait for one node's answer on a lease of `lease`: the node timeout, and never
    /// more than a tenth of the lease.
    fn within(&self, lease: Duration) -> Duration {
        self.node_timeout.min(lease / 10).max(Duration::from_millis(1))
    }

    /// Runs `op` on every node at once, each bounded by `within`; one outcome per node, in order.
    async fn on_all<T, F>(
        &self,
        what: &str,
        within: Duration,
        op: impl Fn(MultiplexedConnection) -> F,
    ) -> Vec<Result<T>>
    where
        F: Future<Output = redis::RedisResult<T>>,
    {
        let op = &op;
        join_all(self.nodes.iter().map(|node| async move {
            let run = async {
                let lane = node.conns.checkout().await?;
                let outcome = op(lane.conn.clone()).await.map_err(Error::from);
                node.conns.report(lane.index, &outcome);
                outcome
            };
            tokio::time::timeout(within, run)
                .await
                .unwrap_or_else(|_| Err(Error::unanswered(format!("redlock node {}", node.address), what, within)))
        }))
        .await
    }

    /// `Err` unless at least a quorum of `outcomes` are answers.
    fn require_quorum<T>(&self, what: &str, outcomes: &[Result<T>]) -> Result<()> {
        let answered = outcomes.iter().filter(|o| o.is_ok()).count();
        if answered >= self.quorum {
            return Ok(());
        }
        let silent: Vec<&str> =
            self.nodes.iter().zip(outcomes).filter(|(_, o)| o.is_err()).map(|(n, _)| n.address.as_str()).collect();
        Err(Error::no_quorum(what, answered, self.quorum, self.nodes.len(), &silent))
    }

    /// Owner-checked release on every node, on the given connections (those of the attempt, so that
    /// each release follows its acquire). Returns how many nodes still had our token.
    async fn release_on(
        conns: Vec<Option<MultiplexedConnection>>,
        hold: &Hold,
        token: &str,
        within: Duration,
    ) -> usize {
        let release = &holds::release(hold, token);
        let releases = conns.into_iter().flatten().map(|mut conn| async move {
            matches!(tokio::time::timeout(within, scripts::owner_checked(&mut conn, release)).await, Ok(Ok(true)))
        });
        join_all(releases).await.into_iter().filter(|released| *released).count()
    }
}

/// The plain lock as a majority of the nodes sees it (`views`: the nodes that answered): held on a
/// quorum, the shortest lease among the holders, the largest fence, the holder id most of them
/// agree on, and the lock-delay left until a quorum of the nodes is out of it. The primitives are
/// not kept on Redlock: a name with their keys on any node is [`LockKind::Unsupported`].
fn majority_view(name: String, views: &[NodeView], nodes: usize, quorum: usize) -> LockInfo {
    let holding: Vec<&NodeView> = views.iter().filter(|v| v.exists()).collect();
    let held = holding.len() >= quorum;
    let ttl = holding.iter().filter_map(|v| v.ttl).min();
    let fence = views.iter().filter_map(|v| v.fence).max();
    // A node frees up when its delay ends; the lock can be had once a quorum has (nodes that did
    // not answer count as never).
    let mut delays: Vec<Duration> = views.iter().map(|v| v.delay.unwrap_or_default()).collect();
    delays.resize(nodes, Duration::MAX);
    delays.sort();
    let delay = delays.get(quorum - 1).copied().filter(|d| !d.is_zero() && *d != Duration::MAX);
    let kind = if views.iter().any(NodeView::has_primitive) {
        LockKind::Unsupported
    } else if holding.is_empty() && delay.is_none() {
        LockKind::Idle
    } else {
        LockKind::Plain
    };
    let mut ids: Vec<&str> = holding.iter().filter_map(|v| v.holder.as_deref()).collect();
    ids.sort_unstable();
    let id = ids.chunk_by(|a, b| a == b).max_by_key(|run| run.len()).map(|run| run[0].to_owned());
    let view = NodeView {
        lock_type: if held { "string" } else { "none" }.to_owned(),
        ttl,
        holder: id.filter(|_| held),
        fence,
        delay,
        ..NodeView::default()
    };
    let mut info = view.into_info(name);
    info.kind = kind;
    info
}

impl Backend for Redlock {
    fn kind(&self) -> BackendKind {
        BackendKind::Redlock { nodes: self.nodes.len(), quorum: self.quorum }
    }

    fn ping(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let outcomes = self
                .on_all("a ping", self.command_timeout, |mut conn| async move {
                    redis::cmd("PING").query_async::<()>(&mut conn).await
                })
                .await;
            for (node, outcome) in self.nodes.iter().zip(&outcomes) {
                if let Err(e) = outcome {
                    tracing::warn!(node = %node.address, error = %e, "redlock node does not answer");
                }
            }
            self.require_quorum("a ping", &outcomes)
        })
    }

    /// Every node that answers must be safe: a grant's majority may be any of them. A node that
    /// does not answer now is not read when it comes back.
    fn check_eviction(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let answers = self
                .on_all("CONFIG GET maxmemory-policy", self.command_timeout, |mut conn| async move {
                    Ok(eviction::command().query_async(&mut conn).await)
                })
                .await;
            for (node, answer) in self.nodes.iter().zip(answers) {
                match answer.and_then(|answer| eviction::check(&node.address, answer)) {
                    Err(e) if e.is_unavailable() => {
                        tracing::warn!(node = %node.address, error = %e, "redlock node's maxmemory-policy not checked");
                    }
                    outcome => outcome?,
                }
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
            let keys = &hold.keys;
            let call = &holds::acquire(hold, token, lease);
            let within = self.within(lease);
            // One connection per node, checked out first: the undo and the releases of a failed
            // attempt go over the same connections, after the requests.
            let lanes =
                join_all(self.nodes.iter().map(|node| tokio::time::timeout(within, node.conns.checkout()))).await;
            let mut lanes: Vec<_> = lanes.into_iter().map(|lane| lane.ok().and_then(Result::ok)).collect();
            let conns: Vec<Option<MultiplexedConnection>> =
                lanes.iter().map(|l| l.as_ref().map(|l| l.conn.clone())).collect();
            let mut undo = {
                let (conns, hold, token) = (conns.clone(), hold.clone(), token.to_owned());
                UndoOnCancel::new(jobs, move || {
                    Box::pin(async move {
                        Self::release_on(conns, &hold, &token, Duration::from_secs(1)).await;
                    })
                })
            };
            let attempts = lanes.iter_mut().zip(&self.nodes).map(|(lane, node)| async move {
                let Some(lane) = lane else {
                    return Err(Error::unanswered(format!("redlock node {}", node.address), "a connection", within));
                };
                let reply = tokio::time::timeout(within, scripts::acquire(&mut lane.conn, call))
                    .await
                    .unwrap_or_else(|_| {
                        Err(redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)))
                    })
                    .map_err(Error::from);
                node.conns.report(lane.index, &reply);
                reply
            });
            let replies = join_all(attempts).await;
            let granted: Vec<u64> = replies
                .iter()
                .filter_map(|r| match r {
                    Ok(AcquireReply::Granted(f)) => Some(*f),
                    _ => None,
                })
                .collect();
            if granted.len() >= self.quorum {
                // Write the largest counter back to every node that answered, before it is used.
                let fence = granted.iter().copied().max().unwrap_or(0);
                let raises = conns.iter().zip(&replies).filter(|(_, r)| r.is_ok()).filter_map(|(c, _)| c.clone()).map(|mut conn| async move {
                    matches!(tokio::time::timeout(within, scripts::raise_fence(&mut conn, keys, fence)).await, Ok(Ok(v)) if v >= fence)
                });
                if join_all(raises).await.into_iter().filter(|raised| *raised).count() >= self.quorum {
                    undo.disarm();
                    return Ok(Grant::Granted(Fence::new(fence)));
                }
            }
            // Not ours: undo every partial grant now, so that no node keeps a key for it.
            Self::release_on(conns, hold, token, within).await;
            undo.disarm();
            self.require_quorum("an acquire", &replies)?;
            let held: Vec<Option<Duration>> = replies
                .iter()
                .filter_map(|r| match r {
                    Ok(AcquireReply::Held(ttl)) => Some(*ttl),
                    _ => None,
                })
                .collect();
            Ok(if held.len() >= self.quorum { Grant::Held(held.into_iter().flatten().min()) } else { Grant::Contested })
        })
    }

    fn release<'a>(&'a self, hold: &'a Hold, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let release = &holds::release(hold, token);
            let outcomes = self
                .on_all("a release", self.command_timeout, |mut conn| async move {
                    scripts::owner_checked(&mut conn, release).await
                })
                .await;
            self.require_quorum("a release", &outcomes)?;
            Ok(outcomes.iter().filter(|o| matches!(o, Ok(true))).count() >= self.quorum)
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal<'a>]) -> BoxFuture<'a, Result<Vec<Renewed>>> {
        Box::pin(async move {
            let within = self.within(batch.iter().map(|r| r.lease).min().unwrap_or_default());
            let calls: &[Call<'_>] = &batch.iter().map(|r| holds::extend(r.hold, r.token, r.lease)).collect::<Vec<_>>();
            let per_node =
                self.on_all("a renewal", within, |mut conn| async move {
                    scripts::extend_pipelined(&mut conn, calls).await
                })
                .await;
            let outcomes = (0..batch.len())
                .map(|i| {
                    let answers = per_node.iter().filter_map(|node| node.as_ref().ok().map(|replies| replies[i]));
                    let (extended, gone) =
                        answers.fold((0, 0), |(yes, no), ours| if ours { (yes + 1, no) } else { (yes, no + 1) });
                    if extended >= self.quorum {
                        Renewed::Extended
                    } else if gone > self.nodes.len() - self.quorum {
                        Renewed::Gone
                    } else {
                        Renewed::Unanswered
                    }
                })
                .collect();
            Ok(outcomes)
        })
    }

    fn raise_fence<'a>(&'a self, keys: &'a LockKeys, at_least: Fence) -> BoxFuture<'a, Result<Fence>> {
        Box::pin(async move {
            let outcomes = self
                .on_all("a fence raise", self.command_timeout, |mut conn| async move {
                    scripts::raise_fence(&mut conn, keys, at_least.get()).await
                })
                .await;
            self.require_quorum("a fence raise", &outcomes)?;
            Ok(Fence::new(outcomes.iter().filter_map(|o| o.as_ref().ok().copied()).max().unwrap_or(0)))
        })
    }

    fn inspect<'a>(&'a self, prefix: &'a str, pattern: &'a str) -> BoxFuture<'a, Result<Vec<LockInfo>>> {
        Box::pin(async move {
            let timeout = self.node_timeout.max(Duration::from_secs(1));
            let scans = self
                .on_all("a scan", timeout, |mut conn| async move { view::scan_names(&mut conn, prefix, pattern).await })
                .await;
            self.require_quorum("an inspection", &scans)?;
            let names: std::collections::BTreeSet<String> = scans.into_iter().flatten().flatten().collect();
            let mut infos = Vec::with_capacity(names.len());
            for name in names {
                let keys = &LockKeys::new(prefix, &name)?;
                let views: Vec<NodeView> = self
                    .on_all("a lock view", timeout, |mut conn| async move { view::read_view(&mut conn, keys).await })
                    .await
                    .into_iter()
                    .flatten()
                    .collect();
                infos.push(majority_view(name, &views, self.nodes.len(), self.quorum));
            }
            Ok(infos)
        })
    }

    fn wake(&self) -> &WakeHub {
        &self.wake
    }

    fn leader<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<Option<Leader>>> {
        Box::pin(async move {
            let read = &leader::read(keys);
            let replies = self
                .on_all("a leader read", self.command_timeout, |mut conn| async move {
                    read.invoke::<redis::Value>(&mut conn).await
                })
                .await;
            self.require_quorum("a leader read", &replies)?;
            let seen: Vec<Leader> =
                replies.into_iter().filter_map(|reply| reply.and_then(leader::parse_read).ok().flatten()).collect();
            Ok(majority_leader(&seen, self.quorum))
        })
    }
}

/// The leader a quorum of nodes agrees on (by value), with the largest of their terms: the
/// grant's fence once it was written back. `None` when no value has a quorum: nobody leads, or
/// a grant is still being made or undone.
fn majority_leader(seen: &[Leader], quorum: usize) -> Option<Leader> {
    let agreeing = |value: &str| seen.iter().filter(|l| l.value() == value).map(Leader::term).collect::<Vec<_>>();
    let value = seen.iter().map(Leader::value).find(|value| agreeing(value).len() >= quorum)?;
    let term = agreeing(value).into_iter().max()?;
    Some(Leader::new(value.to_owned(), term))
}
