//! ZooKeeper (`zk://[user:password@]host:port[,host:port...][/chroot]`): Apache Curator's `InterProcessMutex`
//! recipe, so that Curator, kazoo and lockkit exclude each other on the same lock.
//!
//! # The recipe
//! - Lock `NAME` is the node `<chroot>/NAME` (created on demand, with its missing parents, as
//!   container nodes where the server has them, so ZooKeeper removes it once unused). The client
//!   prefix of Redis does not apply: the path is the name, as the native recipes name it.
//! - Each acquire (all its attempts) owns one EPHEMERAL_SEQUENTIAL child
//!   `_c_<guid>-lock-<10-digit sequence>`, where `<guid>` is the acquire's ticket written as a
//!   UUID: Curator's "protected" name. A later attempt finds its node again by that prefix
//!   (also when the answer to its create was lost), and so does the undo of an acquire that gave
//!   up or was dropped.
//! - Children are sorted by their sequence. Contenders are the children that end in
//!   `-lock-<digits>` (Curator, lockkit) or `__lock__<digits>` (kazoo's `Lock`); the lowest
//!   holds the lock. kazoo counts our nodes when its `Lock` is made with
//!   `extra_lock_patterns=["-lock-"]` (kazoo 2.7.1+).
//! - A leader election's candidate (`election`) is Curator's `LeaderLatch` node instead:
//!   `_c_<guid>-latch-<sequence>`, with the candidate's value as its data; the lowest contender
//!   leads. Latch nodes count as contenders too, so a lock and an election on one path exclude
//!   each other.
//! - A waiter watches only its immediate predecessor (a data watch, like Curator: an exists-watch
//!   left on a node that is already gone would wait for its re-creation), so a release wakes one
//!   waiter, not the herd. The watch feeds the client's local wake-up hub on that waiter's own
//!   channel, so the other waiters of the process sleep on too.
//!
//! # Guarantees, and what makes `lost()` fire
//! A grant lives as long as its node, and the node as long as this client's session: one
//! session per [`LockClient`](crate::LockClient), asking for `default_lease` as its timeout.
//! ZooKeeper grants a timeout within `[2 * tickTime, 20 * tickTime]` (4 s to 40 s with the
//! default `tickTime` of 2 s), so a lease is at most the negotiated timeout
//! ([`lease_for`](Backend::lease_for)). The server answering a request proves the session alive
//! for one more session timeout from when the request was sent; that is a renewal: a `sync`, then
//! one `exists` of our node, checked for its `czxid` and its owner session, both sent at once. A
//! follower answers a read from its own view, which may still show a session that the leader has
//! expired (until the follower hears of it); the `sync` goes through the leader, and the follower
//! answers the read only after it, so the renewal reflects the leader's view as of the sync. (A
//! `sync` is not a quorum write, so a leader that was just deposed could still answer it; a write
//! per renewal would close that too, at the price of a quorum write every third of a lease.)
//!
//! Curator's rule holds here too: **SUSPENDED (connection lost, session maybe alive) means you
//! cannot be sure you still hold the lock: stop writing until RECONNECTED; LOST (session
//! expired) means you do not.** So renewals are `Unanswered` while the connection is down, and
//! `lost()` fires when the connection is not back before the lease (the session timeout) ends;
//! it fires at the next renewal (a third of the lease at most) once the session expired or our
//! node was deleted. After an expiry the next operation opens a new session.
//!
//! A fixed lease (`.lease(d)`, no watchdog) is `min(d, session timeout)`; when it ends without a
//! renewal a background timer deletes the node (owner-checked), and a dead process's session
//! ends it anyway. The same timer lets go of a watched lease whose renewals went unanswered past
//! its end: an owner that cannot prove its lease does not keep the lock.
//!
//! # Fences
//! The fence is the lock node's `czxid`, the ensemble-wide transaction id of its creation.
//! Nodes are created in sequence order and zxids only grow (across leader elections and
//! restarts of a persistent ensemble), so successive holders' fences strictly increase, but they
//! are not dense (every write anywhere in the ensemble consumes a zxid) and are large (the
//! leader epoch is in the high 32 bits). They cannot be raised:
//! [`ensure_fence_at_least`](crate::LockClient::ensure_fence_at_least) returns the lock's
//! latest zxid if it is already high enough, else fails as unavailable.
//!
//! # Cancel safety
//! Every request goes through the one session, in the order the calls were made. An acquire
//! that gives up or is dropped hands the seam's `leave` to the background; it lists the lock's
//! children after the create (so it sees the node if the create reached the server) and deletes
//! the nodes of the acquire's guid. A release is owner-checked by `czxid` and session, so
//! running it twice is harmless.
//!
//! # Who may touch the nodes
//! With credentials in the URL (`zk://user:password@host:port/chroot`), the session authenticates
//! as that `digest` identity and every node it creates (the chroot, each lock's node, each
//! waiter's and holder's node) gets the `creator_all` ACL: only sessions authenticated as the same
//! identity may read them, create or delete waiters under a lock, or delete a holder's node
//! (ZooKeeper checks a delete against the parent's ACL). Other tools sharing the locks (Curator,
//! kazoo, `zkCli`) must add the same digest auth. An ACL is set when a node is created and never
//! changed here: a lock's node (or the chroot) that a client without credentials created stays
//! open until ZooKeeper removes it (lock nodes are containers, removed once empty).
//!
//! Without credentials, nodes get `anyone_all`: any client that reaches the ensemble can delete a
//! holder's node and so take its lock (the holder notices at its next renewal), or read the
//! queue. Rely on the network (only trusted clients reach the ensemble) or give credentials.
//!
//! Not kept here: the reentrant, fair, read-write and semaphore primitives, lock-delay and
//! fence retirement (they are Redis scripts); they fail with a `Config` error.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use futures_util::future::join_all;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::{
    backend::{Backend, BoxFuture},
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
        lock_info::{Holder, HolderRole, LockInfo, LockKind},
        settings::Config,
    },
    wake::WakeHub,
};

/// Opens a session to the ensemble `servers` (`host:port,...`) for locks under `chroot`, as the
/// digest identity `credentials` if given.
pub(crate) async fn open(
    servers: &str,
    chroot: &str,
    credentials: Option<&(String, String)>,
    config: &Config,
) -> Result<Arc<dyn Backend>> {
    let inner = Arc::new(Inner {
        servers: servers.to_owned(),
        digest: credentials.map(|(user, password)| format!("{user}:{password}")),
        sync_renewals: config.controls.keeps(Unprotected::ZooKeeperRenewalWithoutSync),
        chroot: chroot.trim_end_matches('/').to_owned(),
        requested_timeout: config.default_lease,
        command_timeout: config.command_timeout,
        current: Mutex::default(),
        reconnecting: tokio::sync::Mutex::new(()),
        generation: AtomicU64::new(0),
        negotiated_ms: AtomicU64::new(config.default_lease.as_millis() as u64),
        containers: AtomicBool::new(true),
        grants: Mutex::default(),
        watching: Mutex::default(),
        wake: WakeHub::local(config.command_timeout),
    });
    let zookeeper = ZooKeeper { inner };
    zookeeper
        .bounded("opening a session", async {
            let session = zookeeper.inner.session().await?;
            if !zookeeper.inner.chroot.is_empty() {
                let options = zk::CreateMode::Persistent.with_acls(zookeeper.inner.acls());
                session
                    .client
                    .mkdir(&zookeeper.inner.chroot, &options)
                    .await
                    .map_err(|e| failed("creating the chroot", e))?;
            }
            Ok(())
        })
        .await?;
    Ok(Arc::new(zookeeper))
}

/// The ZooKeeper backend: a handle on what its background tasks (watches, lease timers, the
/// session monitor) share through weak references, so that dropping the client closes the
/// session (which deletes its nodes).
#[derive(Debug)]
pub(crate) struct ZooKeeper {
    inner: Arc<Inner>,
}

/// What the backend and its background tasks share.
struct Inner {
    /// `host:port,...`.
    servers: String,
    /// `user:password` of the digest identity the session authenticates as, if the URL gave one.
    /// Never logged.
    digest: Option<String>,
    /// Whether a renewal syncs with the leader before it reads (off only in a test's control).
    sync_renewals: bool,
    /// The chroot without a trailing slash: `""` for the root.
    chroot: String,
    /// Asked for as the session timeout: the client's default lease.
    requested_timeout: Duration,
    command_timeout: Duration,
    /// The session in use; replaced after it expired.
    current: Mutex<Option<Arc<Session>>>,
    /// Serialises opening a new session, so that concurrent operations after an expiry share one.
    reconnecting: tokio::sync::Mutex<()>,
    /// Counts sessions; a session monitor only speaks for the latest one.
    generation: AtomicU64,
    /// The negotiated session timeout of the latest session, in ms: the longest lease.
    negotiated_ms: AtomicU64,
    /// Whether the server takes container nodes (3.5+); cleared on `Unimplemented`.
    containers: AtomicBool,
    /// token -> its node: how release, renewal and the lease timer find a grant.
    grants: Mutex<HashMap<String, Granted>>,
    /// (session generation, predecessor path, the waiter's wake channel) watched right now: one
    /// watch task per waiter and node, however often the waiter tries. Two waiters can watch the
    /// same node: one whose predecessor left watches the node the leaver watched, and the leaver's
    /// watch wakes nobody else.
    watching: Mutex<HashSet<(u64, String, String)>>,
    /// Wakes local waiters when a watched predecessor goes, and says whether the session is
    /// connected (waiters poll while it is not).
    wake: WakeHub,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeper")
            .field("servers", &self.servers)
            .field("chroot", &self.chroot)
            .field("session_timeout", &self.session_timeout())
            .finish_non_exhaustive()
    }
}

/// One ZooKeeper session.
struct Session {
    client: zk::Client,
    generation: u64,
}

impl Session {
    fn id(&self) -> i64 {
        self.client.session_id().0
    }

    fn is_connected(&self) -> bool {
        matches!(self.client.state(), zk::SessionState::SyncConnected)
    }

    fn is_over(&self) -> bool {
        self.client.state().is_terminated()
    }
}

/// A grant: the node that a token holds.
#[derive(Debug, Clone)]
struct Granted {
    /// Absolute path of the node.
    path: String,
    czxid: i64,
    /// The session that owns the node (its generation and its id).
    generation: u64,
    session_id: i64,
    /// When the lease ends unless renewed; the lease timer deletes the node then.
    expires: Instant,
}

impl Inner {
    fn session_timeout(&self) -> Duration {
        Duration::from_millis(self.negotiated_ms.load(Ordering::Relaxed))
    }

    /// The session in use, without opening a new one.
    fn current(&self) -> Option<Arc<Session>> {
        self.current.lock().unwrap().clone()
    }

    /// The session in use, or a new one if it ended (bounded by the caller).
    async fn session(self: &Arc<Self>) -> Result<Arc<Session>> {
        if let Some(session) = self.current().filter(|s| !s.is_over()) {
            return Ok(session);
        }
        let _one_at_a_time = self.reconnecting.lock().await;
        if let Some(session) = self.current().filter(|s| !s.is_over()) {
            return Ok(session);
        }
        let mut connector = zk::Client::connector().with_session_timeout(self.requested_timeout);
        if let Some(digest) = &self.digest {
            // Sent again by the client on every reconnection of the session.
            connector = connector.with_auth("digest", digest.as_bytes());
        }
        let client = connector.connect(&self.servers).await.map_err(|e| failed("connecting", e))?;
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        self.negotiated_ms.store(client.session_timeout().as_millis() as u64, Ordering::Relaxed);
        tracing::debug!(session_timeout = ?client.session_timeout(), generation, "zookeeper session established");
        let session = Arc::new(Session { client, generation });
        self.monitor(&session);
        *self.current.lock().unwrap() = Some(session.clone());
        self.wake.set_connected(session.is_connected());
        Ok(session)
    }

    /// Follows the session's state: waiters poll while it is suspended, and are all woken to
    /// re-check when it comes back or ends. Ends with the session.
    fn monitor(self: &Arc<Self>, session: &Session) {
        let mut states = session.client.state_watcher();
        let generation = session.generation;
        let inner = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let state = states.changed().await;
                let Some(inner) = inner.upgrade() else { return };
                if inner.generation.load(Ordering::Acquire) != generation {
                    return;
                }
                tracing::debug!(%state, generation, "zookeeper session state");
                inner.wake.set_connected(state == zk::SessionState::SyncConnected);
                if state.is_terminated() {
                    inner.watching.lock().unwrap().retain(|(g, ..)| *g != generation);
                    return;
                }
            }
        });
    }

    /// `<chroot>/NAME`, refusing names that are no ZooKeeper path.
    fn dir(&self, name: &str) -> Result<String> {
        let bad = |why: &str| Error::new(ErrorKind::InvalidName, format!("lock name {name:?} {why}"));
        if name.split('/').any(|part| part.is_empty() || part == "." || part == "..") {
            return Err(bad("is no ZooKeeper path (an empty, '.' or '..' segment)"));
        }
        if self.chroot.is_empty() && name.split('/').next() == Some("zookeeper") {
            return Err(bad("is under /zookeeper, which ZooKeeper reserves"));
        }
        Ok(format!("{}/{name}", self.chroot))
    }

    /// The ACL of every node this client creates: with credentials, only the same digest identity
    /// may read, change or delete it, or (on a lock's node) create and delete its waiters; without,
    /// anyone who reaches the ensemble may.
    fn acls(&self) -> zk::Acls<'static> {
        if self.digest.is_some() { zk::Acls::creator_all() } else { zk::Acls::anyone_all() }
    }

    /// Creates the lock node's missing ancestors: containers where the server has them.
    async fn make_dir(&self, client: &zk::Client, dir: &str) -> Result<()> {
        if self.containers.load(Ordering::Relaxed) {
            let options = zk::CreateMode::Container.with_acls(self.acls());
            match client.mkdir(dir, &options).await {
                Err(zk::Error::Unimplemented) => self.containers.store(false, Ordering::Relaxed),
                other => return other.map_err(|e| failed("creating the lock's node", e)),
            }
        }
        let options = zk::CreateMode::Persistent.with_acls(self.acls());
        client.mkdir(dir, &options).await.map_err(|e| failed("creating the lock's node", e))
    }

    /// One attempt, unbounded (the caller bounds it).
    async fn attempt(self: &Arc<Self>, hold: &Hold, token: &str, lease: Duration) -> Result<Grant> {
        let started = Instant::now();
        let session = self.session().await?;
        if !session.is_connected() {
            return Err(suspended());
        }
        let client = &session.client;
        let dir = self.dir(&hold.keys.name)?;
        let protected = protected_prefix(&hold.ticket);
        let mut created: Option<(String, zk::Stat)> = None;
        for _ in 0..MAX_ROUNDS {
            let children = match client.list_children(&dir).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(failed("listing the lock's waiters", e)),
            };
            let queue = contenders(&children);
            let granted_paths: HashSet<String> = self.grants.lock().unwrap().values().map(|g| g.path.clone()).collect();
            // Our node: the one this attempt created, or else the latest of this acquire that no
            // grant of it claims (a grant answered too late is being released: not reusable).
            let ours = match &created {
                Some((name, _)) => queue.iter().position(|c| c.name == name),
                None => queue.iter().rposition(|c| {
                    c.name.starts_with(&protected) && !granted_paths.contains(&format!("{dir}/{}", c.name))
                }),
            };
            // None yet (or the one we created is not listed: deleted meanwhile by an operator).
            let Some(position) = ours else {
                created = Some(self.create_node(client, &dir, &protected, hold).await?);
                continue;
            };
            let name = queue[position].name;
            let path = format!("{dir}/{name}");
            if position == 0 {
                let stat = match &created {
                    Some((created_name, stat)) if created_name == name => *stat,
                    _ => match client.check_stat(&path).await.map_err(|e| failed("reading our node", e))? {
                        Some(stat) => stat,
                        None => continue,
                    },
                };
                if stat.ephemeral_owner != session.id() {
                    // Left by an earlier session that the server has not expired yet: it goes
                    // with that session. Queue behind it with a node of this session.
                    created = Some(self.create_node(client, &dir, &protected, hold).await?);
                    continue;
                }
                self.record(token, path, stat.czxid, &session, started + lease);
                return Ok(Grant::Granted(Fence::new(stat.czxid as u64)));
            }
            let predecessor = format!("{dir}/{}", queue[position - 1].name);
            match client.get_and_watch_data(&predecessor).await {
                Ok((_, _, watcher)) => {
                    self.watch(&session, predecessor, watcher, hold.waiter_channel());
                    return Ok(Grant::Held(None));
                }
                // Gone between the listing and the watch: look again.
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(failed("watching the predecessor", e)),
            }
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            format!("the waiters of lock {:?} changed faster than they could be read", hold.keys.name),
        ))
    }

    /// Creates this acquire's node; returns its name and stat. A lock's node is Curator's
    /// `InterProcessMutex`'s (`-lock-`, no data); a candidate's is its `LeaderLatch`'s (`-latch-`,
    /// the value as its data).
    async fn create_node(
        &self,
        client: &zk::Client,
        dir: &str,
        protected: &str,
        hold: &Hold,
    ) -> Result<(String, zk::Stat)> {
        let (marker, data) = match hold.leader_value() {
            Some(value) => (LATCH_MARKER, value.as_bytes()),
            None => (LOCK_MARKER, &[][..]),
        };
        let prefix = format!("{dir}/{protected}{marker}");
        let options = zk::CreateMode::EphemeralSequential.with_acls(self.acls());
        // The lock's node may be missing, or removed as an empty container right after we made it.
        for _ in 0..3 {
            match client.create(&prefix, data, &options).await {
                Ok((stat, sequence)) => return Ok((format!("{protected}{marker}{sequence}"), stat)),
                Err(zk::Error::NoNode) => self.make_dir(client, dir).await?,
                Err(e) => return Err(failed("creating our node", e)),
            }
        }
        Err(Error::new(ErrorKind::Unavailable, format!("the node {dir} keeps disappearing")))
    }

    /// Records a grant and starts its lease timer.
    fn record(self: &Arc<Self>, token: &str, path: String, czxid: i64, session: &Session, expires: Instant) {
        let granted = Granted { path, czxid, generation: session.generation, session_id: session.id(), expires };
        self.grants.lock().unwrap().insert(token.to_owned(), granted);
        tokio::spawn(lease_timer(Arc::downgrade(self), token.to_owned()));
    }

    /// Wakes the waiter of `channel` when `predecessor` changes or goes (once per node, waiter
    /// and session, however many attempts watch it).
    fn watch(self: &Arc<Self>, session: &Session, predecessor: String, watcher: zk::OneshotWatcher, channel: String) {
        let key = (session.generation, predecessor, channel.clone());
        if !self.watching.lock().unwrap().insert(key.clone()) {
            return;
        }
        let inner = Arc::downgrade(self);
        let wake = self.wake.clone();
        tokio::spawn(async move {
            let _event = watcher.changed().await;
            if let Some(inner) = inner.upgrade() {
                inner.watching.lock().unwrap().remove(&key);
            }
            wake.deliver_all(&channel);
        });
    }

    /// Deletes a grant's node if it is still ours (same czxid, owned by its session). `Ok(false)`
    /// when it was not (any more).
    async fn delete_owned(&self, granted: &Granted) -> Result<bool> {
        let Some(session) = self.current().filter(|s| s.generation == granted.generation && !s.is_over()) else {
            // Its session ended: the server deleted the node with it.
            return Ok(false);
        };
        let client = &session.client;
        let stat = match client.check_stat(&granted.path).await {
            Ok(Some(stat)) => stat,
            Ok(None) | Err(zk::Error::SessionExpired) => return Ok(false),
            Err(e) => return Err(failed("reading our node", e)),
        };
        if stat.czxid != granted.czxid || stat.ephemeral_owner != granted.session_id {
            return Ok(false);
        }
        match client.delete(&granted.path, Some(stat.version)).await {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode | zk::Error::BadVersion | zk::Error::SessionExpired) => Ok(false),
            Err(e) => Err(failed("deleting our node", e)),
        }
    }

    /// One renewal: a round trip that proves the session alive and the node still ours.
    async fn renew_one(&self, token: &str, lease: Duration) -> Renewed {
        let Some(granted) = self.grants.lock().unwrap().get(token).cloned() else { return Renewed::Gone };
        let Some(session) = self.current().filter(|s| s.generation == granted.generation) else {
            return Renewed::Gone;
        };
        if session.is_over() {
            return Renewed::Gone;
        }
        if !session.is_connected() {
            // SUSPENDED: the session may live on, but nothing proves it.
            return Renewed::Unanswered;
        }
        let sent_at = Instant::now();
        let client = &session.client;
        // A follower answers a read from its own view, which shows the session alive for as long
        // as the follower has not heard from the leader that it expired. A sync goes through the
        // leader, and the server answers our read only after it: the read then reflects the
        // leader's view as of the sync. Both requests leave now, in this order, in one round trip.
        let synced = self.sync_renewals.then(|| client.sync(&granted.path));
        let read = client.check_stat(&granted.path);
        let renewal = async move {
            if let Some(synced) = synced {
                synced.await?;
            }
            read.await
        };
        match tokio::time::timeout(self.command_timeout, renewal).await {
            Ok(Ok(Some(stat))) if stat.czxid == granted.czxid && stat.ephemeral_owner == granted.session_id => {
                if let Some(granted) = self.grants.lock().unwrap().get_mut(token) {
                    granted.expires = granted.expires.max(sent_at + lease);
                }
                Renewed::Extended
            }
            Ok(Ok(_) | Err(zk::Error::SessionExpired)) => Renewed::Gone,
            Ok(Err(_)) | Err(_) => Renewed::Unanswered,
        }
    }

    /// Deletes the nodes an acquire left (those named by its guid).
    async fn leave(self: &Arc<Self>, hold: &Hold) -> Result<()> {
        let session = self.session().await?;
        let dir = self.dir(&hold.keys.name)?;
        let protected = protected_prefix(&hold.ticket);
        let children = match session.client.list_children(&dir).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(()),
            Err(e) => return Err(failed("listing the lock's waiters", e)),
        };
        let deletes = children
            .iter()
            .filter(|child| child.starts_with(&protected))
            // Owner-checked by name: the guid is this acquire's own.
            .map(|child| session.client.delete(&format!("{dir}/{child}"), None));
        for outcome in join_all(deletes).await {
            match outcome {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(failed("deleting a waiter's node", e)),
            }
        }
        Ok(())
    }

    /// The leader of the election at `keys.name`: the lowest contender's data and `czxid` (Curator's
    /// `LeaderLatch.getLeader`).
    async fn leader(self: &Arc<Self>, keys: &LockKeys) -> Result<Option<Leader>> {
        let session = self.session().await?;
        let client = &session.client;
        let dir = self.dir(&keys.name)?;
        for _ in 0..MAX_ROUNDS {
            let children = match client.list_children(&dir).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => return Ok(None),
                Err(e) => return Err(failed("listing the candidates", e)),
            };
            let Some(first) = contenders(&children).first().map(|c| format!("{dir}/{}", c.name)) else {
                return Ok(None);
            };
            match client.get_data(&first).await {
                Ok((data, stat)) => {
                    let value = String::from_utf8_lossy(&data).into_owned();
                    return Ok(Some(Leader::new(value, Fence::new(stat.czxid as u64))));
                }
                // Gone since the listing (a resignation): look again.
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(failed("reading the leader", e)),
            }
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            format!("the candidates of {:?} changed faster than they could be read", keys.name),
        ))
    }

    /// The locks under the chroot whose names match `pattern`.
    async fn inspect(self: &Arc<Self>, pattern: &str) -> Result<Vec<LockInfo>> {
        let timeout = self.command_timeout;
        let session = within(timeout, "opening a session", self.session()).await?;
        let client = &session.client;
        // Each read is bounded (a walk of many names takes many round trips).
        let list =
            |path: String| within(timeout, "listing locks", async move { Ok(client.list_children(&path).await) });
        let stat = |path: String| {
            within(timeout, "reading a holder", async move {
                client.check_stat(&path).await.map_err(|e| failed("reading a holder", e))
            })
        };
        let root = if self.chroot.is_empty() { "/".to_owned() } else { self.chroot.clone() };
        let mut found = Vec::new();
        let mut pending = VecDeque::from([(String::new(), 0)]);
        let mut visited = 0;
        while let Some((name, depth)) = pending.pop_front() {
            visited += 1;
            if visited > INSPECT_MAX_NODES {
                tracing::warn!(visited, "zookeeper inspect stopped early: too many nodes under the chroot");
                break;
            }
            let path = if name.is_empty() { root.clone() } else { format!("{}/{name}", self.chroot) };
            let children = match list(path.clone()).await? {
                Ok(children) => children,
                // Deleted while we walked (an unused container).
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(failed("listing locks", e)),
            };
            let queue = contenders(&children);
            if !name.is_empty() && (!queue.is_empty() || children.is_empty()) && crate::glob::matches(pattern, &name) {
                found.push((name.clone(), queue.first().map(|c| format!("{path}/{}", c.name))));
            }
            if depth < INSPECT_MAX_DEPTH {
                for child in &children {
                    let reserved = name.is_empty() && self.chroot.is_empty() && child == "zookeeper";
                    if !reserved && sequence_of(child).is_none() {
                        let child_name = if name.is_empty() { child.clone() } else { format!("{name}/{child}") };
                        pending.push_back((child_name, depth + 1));
                    }
                }
            }
        }
        let mut infos = Vec::with_capacity(found.len());
        for (name, holder) in found {
            let stat = match &holder {
                Some(path) => stat(path.clone()).await?,
                None => None,
            };
            let holders = holder
                .as_deref()
                .filter(|_| stat.is_some())
                .map(|path| Holder { role: HolderRole::Lock, id: holder_id(path), ttl: None })
                .into_iter()
                .collect::<Vec<_>>();
            infos.push(LockInfo {
                name,
                held: !holders.is_empty(),
                ttl: None,
                fence: stat.map(|s| Fence::new(s.czxid as u64)),
                kind: if holders.is_empty() { LockKind::Idle } else { LockKind::Plain },
                holders,
                owner: None,
                permits: None,
                queue: Vec::new(),
                writer_waiting: None,
                delay: None,
            });
        }
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(infos)
    }
}

/// Deletes a grant's node once its lease ended without a renewal (a fixed lease, or a watched one
/// whose renewals went unanswered), unless it was released first.
async fn lease_timer(inner: Weak<Inner>, token: String) {
    loop {
        let expires = {
            let Some(inner) = inner.upgrade() else { return };
            let grants = inner.grants.lock().unwrap();
            let Some(granted) = grants.get(&token) else { return };
            granted.expires
        };
        tokio::time::sleep_until(expires).await;
        let Some(inner) = inner.upgrade() else { return };
        let Some(granted) = inner.grants.lock().unwrap().get(&token).cloned() else { return };
        if granted.expires > Instant::now() {
            continue;
        }
        match tokio::time::timeout(inner.command_timeout, inner.delete_owned(&granted)).await {
            Ok(Ok(_)) => {
                inner.grants.lock().unwrap().remove(&token);
                return;
            }
            // Not connected now: try again while the session may still hold the node.
            _ => tokio::time::sleep(LEASE_TIMER_RETRY).await,
        }
    }
}

/// Attempts to find our place in a queue that keeps changing under us before giving up (the
/// acquire loop then retries after a pause).
const MAX_ROUNDS: usize = 16;

/// How often the lease timer retries deleting an expired grant's node while disconnected.
const LEASE_TIMER_RETRY: Duration = Duration::from_millis(200);

/// Bounds of the walk that finds lock names for `inspect`.
const INSPECT_MAX_NODES: usize = 10_000;
const INSPECT_MAX_DEPTH: usize = 16;

/// Curator's marker before a lock node's sequence.
const LOCK_MARKER: &str = "lock-";

/// Curator's `LeaderLatch` marker before a candidate node's sequence.
const LATCH_MARKER: &str = "latch-";

/// What precedes the sequence of a contender: Curator's mutex (and ours), kazoo's `Lock`, and
/// Curator's `LeaderLatch` (our election's candidates).
const CONTENDER_MARKERS: [&str; 3] = ["-lock-", "__lock__", "-latch-"];

/// A lock node among a lock's children.
#[derive(Debug, PartialEq, Eq)]
struct Contender<'a> {
    sequence: u64,
    name: &'a str,
}

/// The sequence of a contender's name: the digits (at least 10) after a contender marker.
fn sequence_of(name: &str) -> Option<u64> {
    let start = name.len() - name.bytes().rev().take_while(u8::is_ascii_digit).count();
    let (head, sequence) = name.split_at(start);
    if sequence.len() < 10 || !CONTENDER_MARKERS.iter().any(|marker| head.ends_with(marker)) {
        return None;
    }
    sequence.parse().ok()
}

/// The contenders among `children`, in sequence order (the holder first).
fn contenders(children: &[String]) -> Vec<Contender<'_>> {
    let mut queue: Vec<Contender<'_>> =
        children.iter().filter_map(|name| sequence_of(name).map(|sequence| Contender { sequence, name })).collect();
    queue.sort_by_key(|c| c.sequence);
    queue
}

/// `_c_<guid>-`: Curator's protected prefix, with the acquire's ticket as a UUID.
fn protected_prefix(ticket: &str) -> String {
    let guid = if ticket.len() == 32 && ticket.is_ascii() {
        format!("{}-{}-{}-{}-{}", &ticket[..8], &ticket[8..12], &ticket[12..16], &ticket[16..20], &ticket[20..])
    } else {
        ticket.to_owned()
    };
    format!("_c_{guid}-")
}

/// A short id of a holder's node for operators: the first 8 characters of its guid (or of its
/// name, for a node that is not Curator's protected one).
fn holder_id(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_prefix("_c_").unwrap_or(name).chars().take(8).collect()
}

/// A ZooKeeper error as lockkit's: unavailable unless retrying cannot help.
fn failed(what: &str, e: zk::Error) -> Error {
    let kind = match e {
        zk::Error::NoAuth | zk::Error::AuthFailed | zk::Error::InvalidAcl | zk::Error::BadArguments(_) => {
            ErrorKind::Config
        }
        _ => ErrorKind::Unavailable,
    };
    Error::new(kind, format!("zookeeper: {what} failed")).with_source(e)
}

/// The error of an operation tried while the connection is suspended.
fn suspended() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "the zookeeper connection is suspended: the session may be alive but cannot be used until it reconnects",
    )
}

/// Runs `op` within `timeout`; past it, an unavailable error that says what went unanswered.
async fn within<T>(timeout: Duration, what: &str, op: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(timeout, op).await.unwrap_or_else(|_| {
        Err(Error::new(ErrorKind::Unavailable, format!("zookeeper did not answer {what} within {timeout:?}")))
    })
}

impl ZooKeeper {
    /// Runs `op` within the command timeout.
    async fn bounded<T>(&self, what: &str, op: impl Future<Output = Result<T>>) -> Result<T> {
        within(self.inner.command_timeout, what, op).await
    }
}

impl Backend for ZooKeeper {
    fn kind(&self) -> BackendKind {
        BackendKind::ZooKeeper
    }

    fn ping(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.bounded("a ping", async {
            let session = self.inner.session().await?;
            let root = if self.inner.chroot.is_empty() { "/" } else { &self.inner.chroot };
            session.client.check_stat(root).await.map_err(|e| failed("a ping", e))?;
            Ok(())
        }))
    }

    fn acquire<'a>(
        &'a self,
        hold: &'a Arc<Hold>,
        token: &'a str,
        lease: Duration,
        _jobs: &'a Jobs,
    ) -> BoxFuture<'a, Result<Grant>> {
        // No undo of its own: a node left by a dropped or failed attempt is found again by the
        // next attempt of the same acquire (by its guid), and the acquire's `leave` deletes it
        // when the acquire gives up or is dropped (see `must_leave`).
        Box::pin(async move { self.bounded("an acquire", self.inner.attempt(hold, token, lease)).await })
    }

    fn release<'a>(&'a self, _hold: &'a Hold, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let Some(granted) = self.inner.grants.lock().unwrap().get(token).cloned() else { return Ok(false) };
            // A lease that ended unrenewed was lost even if its node survived (the session came
            // back in time): the node goes, but the grant no longer counts as held.
            let ended = granted.expires <= Instant::now();
            let deleted = self.bounded("a release", self.inner.delete_owned(&granted)).await?;
            self.inner.grants.lock().unwrap().remove(token);
            Ok(deleted && !ended)
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal<'a>]) -> BoxFuture<'a, Result<Vec<Renewed>>> {
        Box::pin(async move {
            let timeout = self.inner.session_timeout();
            if let Some(long) = batch.iter().find(|r| r.lease > timeout) {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "a zookeeper lease cannot outlast the session timeout ({timeout:?}); {:?} was asked",
                        long.lease
                    ),
                ));
            }
            Ok(join_all(batch.iter().map(|r| self.inner.renew_one(r.token, r.lease))).await)
        })
    }

    fn raise_fence<'a>(&'a self, keys: &'a LockKeys, at_least: Fence) -> BoxFuture<'a, Result<Fence>> {
        Box::pin(self.bounded("a fence read", async move {
            let session = self.inner.session().await?;
            let dir = self.inner.dir(&keys.name)?;
            let root = if self.inner.chroot.is_empty() { "/" } else { &self.inner.chroot };
            // Every later grant of the lock is created after this read: its czxid is larger.
            let mut stat = session.client.check_stat(&dir).await.map_err(|e| failed("reading the lock", e))?;
            if stat.is_none() {
                stat = session.client.check_stat(root).await.map_err(|e| failed("reading the chroot", e))?;
            }
            let latest = stat.map_or(0, |s| s.czxid.max(s.mzxid).max(s.pzxid)).max(0) as u64;
            if latest >= at_least.get() {
                return Ok(Fence::new(latest));
            }
            Err(Error::unsupported(format!(
                "zookeeper fences are zxids, which cannot be raised: lock {:?} is at {latest}, below {at_least} \
                     (only new transactions, or a new leader epoch, move zxids up)",
                keys.name
            )))
        }))
    }

    fn inspect<'a>(&'a self, _prefix: &'a str, pattern: &'a str) -> BoxFuture<'a, Result<Vec<LockInfo>>> {
        Box::pin(async move { self.inner.inspect(pattern).await })
    }

    fn wake(&self) -> &WakeHub {
        &self.inner.wake
    }

    fn wake_channel(&self, hold: &Hold) -> String {
        hold.waiter_channel()
    }

    fn lease_for(&self, requested: Duration) -> Duration {
        requested.min(self.inner.session_timeout())
    }

    fn leader<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<Option<Leader>>> {
        Box::pin(self.bounded("a leader read", self.inner.leader(keys)))
    }

    fn watch_leader<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<Option<BoxFuture<'static, ()>>>> {
        Box::pin(self.bounded("a watch", async move {
            let session = self.inner.session().await?;
            let dir = self.inner.dir(&keys.name)?;
            // A child watch fires on every candidate's create and delete (the leader's data never
            // changes), and on the session's own events.
            match session.client.list_and_watch_children(&dir).await {
                Ok((_, watcher)) => {
                    let changed: BoxFuture<'static, ()> = Box::pin(async move {
                        watcher.changed().await;
                    });
                    Ok(Some(changed))
                }
                // No candidate yet (or an unused container removed): watch for the node's creation.
                Err(zk::Error::NoNode) => {
                    let (stat, watcher) = session
                        .client
                        .check_and_watch_stat(&dir)
                        .await
                        .map_err(|e| failed("watching the election's node", e))?;
                    // Created since the listing: done at once, so that the observer watches its
                    // children instead.
                    let created: BoxFuture<'static, ()> = Box::pin(async move {
                        if stat.is_none() {
                            watcher.changed().await;
                        }
                    });
                    Ok(Some(created))
                }
                Err(e) => Err(failed("watching the candidates", e)),
            }
        }))
    }

    fn must_leave(&self, hold: &Hold) -> bool {
        hold.is_plain_lock()
    }

    fn leave<'a>(&'a self, hold: &'a Hold) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.bounded("leaving the queue", self.inner.leave(hold)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contenders_are_curator_and_kazoo_nodes_in_sequence_order() {
        let children: Vec<String> = [
            "_c_8c4c2e1e-0d7d-4b46-9a43-1f0b6d3d5a11-lock-0000000007",
            "0f1e2d3c4b5a__lock__0000000003",
            "_c_aaaa-lock-0000000005",
            "leases",
            "not-a-lock-12",
            "x-lock-00000000",
            "zzz__rlock__0000000001",
        ]
        .map(String::from)
        .to_vec();

        let queue = contenders(&children);

        let names: Vec<&str> = queue.iter().map(|c| c.name).collect();
        assert_eq!(names, [&children[1], &children[2], &children[0]]);
        assert_eq!(queue[0].sequence, 3);
    }

    #[test]
    fn the_protected_prefix_is_the_ticket_as_a_uuid() {
        let ticket = "0123456789abcdef0123456789abcdef";
        assert_eq!(protected_prefix(ticket), "_c_01234567-89ab-cdef-0123-456789abcdef-");
        let node = format!("{}lock-0000000001", protected_prefix(ticket));
        assert_eq!(sequence_of(&node), Some(1));
        assert_eq!(holder_id(&format!("/a/{node}")), "01234567");
    }

    /// Curator's `LeaderLatch` names its participants `_c_<guid>-latch-<sequence>`: they are
    /// contenders, in sequence order with the lock nodes.
    #[test]
    fn latch_nodes_are_contenders_in_sequence_order() {
        let children: Vec<String> =
            ["_c_bbbb-latch-0000000009", "_c_aaaa-latch-0000000004", "_c_cccc-lock-0000000006", "latchless-0000000001"]
                .map(String::from)
                .to_vec();
        let names: Vec<&str> = contenders(&children).iter().map(|c| c.name).collect();
        assert_eq!(names, ["_c_aaaa-latch-0000000004", "_c_cccc-lock-0000000006", "_c_bbbb-latch-0000000009"]);
    }
}
