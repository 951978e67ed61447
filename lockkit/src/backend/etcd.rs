//! etcd v3: the layout of etcd's own Go `concurrency.Mutex` (what `etcdctl lock NAME` uses), so
//! that lockkit and etcd's tools exclude each other on the same name with default settings.
//!
//! # The recipe
//! - **Acquire** (one attempt): the acquire grants a lease (TTL: the requested lease rounded up to
//!   whole seconds; the server raises it to its minimum, 1.5 election timeouts rounded up: a 1 s
//!   lease is granted 2 s by an etcd with the default 1000 ms timeout) under an id of our choosing,
//!   so that an undo can revoke it even if the grant's answer was lost. Its key is `NAME/<lease id
//!   in lowercase hex>` (Go's `%x`), written by the recipe's transaction: *if the key's create
//!   revision is 0, put it (empty, under the lease), else read it; either way read the owner*, the
//!   key with the lowest create revision under `NAME/`. Ours is the lowest: the lock is ours. Not
//!   ours: we watch, as Go's `waitDeletes` does, only the key with the largest create revision
//!   below ours (our predecessor); unlike Go, from etcd's current revision, then reading it
//!   again (see `Waiting::watch`). Its delete (a release, a revoked or expired lease) wakes that
//!   waiter alone, on its own channel of the local [`WakeHub`]; it retries at once, without
//!   polling. The later attempts of one acquire (one `ticket`) reuse its key and lease, so a
//!   waiter keeps its place in the queue.
//! - **Leader election** (`election`) is the same recipe with a value: the key holds the
//!   candidate's value, as etcd's Go `concurrency.Election` puts it (`etcdctl elect NAME VALUE`),
//!   and the leader is the key with the lowest create revision under `NAME/`, its term that
//!   create revision.
//! - **Fence**: the create revision of our key. etcd's revision only grows, and the owner is
//!   always the key with the lowest create revision, so each new holder of a name has a larger
//!   fence than every holder before it, across clients, tools and server restarts (the revision
//!   is persisted with the data).
//! - **Lease**: renewed by one keep-alive per watchdog renewal (every third of the lease): a TTL
//!   above 0 extends it, TTL 0 means etcd no longer has the lease (expired or revoked) and the
//!   guard's `lost()` fires at once. (etcd-client reports that TTL 0 as an error with a message
//!   only, so such an error is confirmed by etcd's `LeaseTimeToLive`, whose TTL -1 says "no such
//!   lease"; no message text is ever matched.) No answer within the command timeout retries until the lease's
//!   local deadline, when `lost()` fires. A fixed lease (`.lease(d)`) is never kept alive: etcd
//!   deletes the key at its TTL. Each attempt that reuses a waiter's lease first keeps it alive,
//!   so that the lease outlasts the grant's local deadline; a waiter's lease is also kept alive
//!   while it waits (every third of its TTL), so a long wait keeps its place.
//! - **Release** is owner-checked: the key is deleted only if its create revision is still ours,
//!   then the lease is revoked. A waiter that gives up (its wait ran out, or its acquire was
//!   dropped) deletes its key and revokes its lease ([`Backend::leave`]).
//!
//! # Guarantees and limits
//! The failure rule: the guard's `lost()` fires when etcd says the lease is gone, or when no
//! keep-alive was answered before the local deadline (the lease measured from before the request,
//! less a drift margin, so it ends before etcd's own expiry). A holder paused past its lease
//! cannot be stopped by any lock: the protected store must refuse stale fences. Deleting a held
//! key by hand (`etcdctl del`) while its lease lives is not noticed by its holder until its
//! release. A process that exits right after an acquire gave up, before the background leave
//! ran (a CLI), leaves its waiter's key until its lease's TTL, as a Go session that is not closed
//! does: ask a short lease of such acquires. Only the plain lock is kept here: the other primitives and the lock-delay are refused
//! with a `Config` error. Keys are named by the lock name itself (`config.prefix` is not used),
//! exactly as etcd's recipe names them; a name `a` also counts keys of a name `a/b` as contenders,
//! as in Go.
//!
//! # Cancel safety
//! Every request of an attempt goes out after the acquire's state (its lease id and key) is
//! recorded under its ticket, so when an acquire gives up or is dropped mid-flight, its
//! [`leave`](Backend::leave) (run in the background by the acquire loop) finds them and revokes
//! the lease. A revoke is ordered against whatever was still in flight: a put under a revoked
//! lease fails, and a revoke after the put deletes the key with the lease.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    sync::{Arc, Mutex},
    time::Duration,
};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue, LeaseGrantOptions, PutOptions,
    SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions,
};
use futures_util::future::join_all;

use crate::{
    backend::{Backend, BoxFuture},
    glob,
    jobs::Jobs,
    model::{
        backend_kind::BackendKind,
        error::{Error, ErrorKind, Result},
        fence::Fence,
        grant::{Grant, Renewal, Renewed},
        hold::Hold,
        keys::LockKeys,
        leader::Leader,
        lock_info::{Holder, HolderRole, LockInfo, LockKind, Waiter},
        settings::Config,
    },
    wake::WakeHub,
};

/// HTTP/2 keep-alive pings while a watch or another stream is open, so that a watch on a server
/// that stopped answering breaks (and waiters fall back to polling) instead of hanging. Not below
/// etcd's default `--grpc-keepalive-min-time` of 5 s, which answers faster pings with `GOAWAY`.
const PING_INTERVAL: Duration = Duration::from_secs(10);

/// Keys read per page when listing locks.
const PAGE: i64 = 500;

/// Opens a client to `endpoints` (`http://host:port`) and checks that the cluster answers, both
/// within the command timeout.
pub(crate) async fn open(
    endpoints: &[String],
    credentials: Option<&(String, String)>,
    config: &Config,
) -> Result<Arc<dyn Backend>> {
    let timeout = config.command_timeout;
    let mut options = ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_keep_alive(PING_INTERVAL, timeout.max(Duration::from_secs(1)));
    if let Some((user, password)) = credentials {
        options = options.with_user(user.as_str(), password.as_str());
    }
    let client = tokio::time::timeout(timeout, Client::connect(endpoints, Some(options)))
        .await
        .map_err(|_| Error::unanswered(BackendKind::Etcd, "a connection", timeout))?
        .map_err(|e| failed("connecting to etcd", e))?;
    let backend = Etcd {
        client,
        endpoints: endpoints.to_vec(),
        command_timeout: timeout,
        wake: WakeHub::local(timeout),
        contenders: Mutex::default(),
        grants: Mutex::default(),
    };
    backend.ping().await?;
    backend.wake.set_connected(true);
    Ok(Arc::new(backend))
}

/// An etcd cluster keeping locks in the layout of etcd's `concurrency.Mutex`.
pub(crate) struct Etcd {
    client: Client,
    /// For `Debug` and logs (never the credentials).
    endpoints: Vec<String>,
    /// Bound of every request.
    command_timeout: Duration,
    /// Fed by the waiters' watches of their predecessors: connected while watches can be created.
    wake: WakeHub,
    /// Each acquire in progress, by its ticket: its lease and key survive from one attempt to the
    /// next (its place in the queue), and its leave finds them.
    contenders: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Contender>>>>,
    /// Each grant in force, by its token: what renewal and release act on.
    grants: Mutex<HashMap<String, Owned>>,
}

impl fmt::Debug for Etcd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Etcd").field("endpoints", &self.endpoints).finish_non_exhaustive()
    }
}

/// One acquire's place on the server: its lease and key, kept across its attempts.
struct Contender {
    /// Our lease id (chosen by us, so that it can be revoked even if the grant's answer was lost).
    lease: i64,
    /// `NAME/<lease id in hex>`.
    key: String,
    /// The TTL etcd granted, in seconds; 0 until etcd confirmed the grant.
    ttl: i64,
    /// While waiting: the task that watches the predecessor and keeps our lease alive. Dropping it
    /// stops both.
    waiting: Option<AbortOnDrop>,
}

impl Contender {
    fn new(name: &str) -> Self {
        let lease = rand::random_range(1..=i64::MAX);
        Self { lease, key: lock_key(name, lease), ttl: 0, waiting: None }
    }

    /// Our lease is gone (or may never have been granted): start over with a fresh one, at the end
    /// of the queue.
    fn start_over(&mut self, name: &str) {
        *self = Self::new(name);
    }
}

/// A grant in force: our key, its lease, and its create revision (the fence).
#[derive(Debug, Clone)]
struct Owned {
    key: String,
    lease: i64,
    revision: i64,
}

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `NAME/<lease id>`, as Go's `fmt.Sprintf("%s%x", pfx, lease)` writes it.
fn lock_key(name: &str, lease: i64) -> String {
    format!("{name}/{lease:x}")
}

/// The prefix of a name's contenders: `NAME/`.
fn contenders_prefix(name: &str) -> String {
    format!("{name}/")
}

/// The requested lease in whole seconds, rounded up (etcd leases have a TTL in seconds).
fn ttl_seconds(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis().div_ceil(1000)).unwrap_or(i64::MAX).max(1)
}

/// `WithFirstCreate` / `WithLastCreate` of Go's client: the one key under the prefix with the
/// lowest (or highest) create revision.
fn by_create(order: SortOrder) -> GetOptions {
    GetOptions::new().with_prefix().with_sort(SortTarget::Create, order).with_limit(1)
}

/// The error of a failed request: `Config` for what retrying cannot fix (refused credentials or
/// permissions, a bad argument), `Unavailable` otherwise.
fn failed(what: &str, e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    let kind = match &e {
        E::GRpcStatus(status)
            if matches!(
                status.code() as i32,
                grpc::INVALID_ARGUMENT | grpc::PERMISSION_DENIED | grpc::UNAUTHENTICATED
            ) =>
        {
            ErrorKind::Config
        }
        E::InvalidArgs(_) | E::InvalidUri(_) | E::EndpointError(_) => ErrorKind::Config,
        _ => ErrorKind::Unavailable,
    };
    Error::new(kind, format!("etcd: {what} failed")).with_source(e)
}

/// The gRPC status codes told apart here (numbered by the gRPC spec; `tonic` is not a direct
/// dependency).
mod grpc {
    pub(super) const INVALID_ARGUMENT: i32 = 3;
    pub(super) const NOT_FOUND: i32 = 5;
    pub(super) const PERMISSION_DENIED: i32 = 7;
    pub(super) const UNAUTHENTICATED: i32 = 16;
}

/// What a failed lease request says about the lease, told by the error's kind and gRPC code,
/// never by its message.
#[derive(Debug, PartialEq, Eq)]
enum LeaseAnswer {
    /// etcd has no such lease: its `ErrGRPCLeaseNotFound` is the gRPC code `NOT_FOUND` (a revoke
    /// or a time-to-live of a lease that expired or was revoked).
    NotFound,
    /// The client turned the keep-alive's answer into an error that carries only a message: etcd's
    /// TTL 0 (no such lease), or the client's own request stream closing. Only etcd can tell
    /// which: ask it ([`lease_ttl`]).
    AskEtcd,
    /// A failure that says nothing about the lease (no answer, refused credentials, ...).
    Failed,
}

fn lease_answer(e: &etcd_client::Error) -> LeaseAnswer {
    match e {
        etcd_client::Error::GRpcStatus(status) if status.code() as i32 == grpc::NOT_FOUND => LeaseAnswer::NotFound,
        etcd_client::Error::LeaseKeepAliveError(_) => LeaseAnswer::AskEtcd,
        _ => LeaseAnswer::Failed,
    }
}

/// The lease's remaining TTL in seconds as etcd's `LeaseTimeToLive` answers it: -1 when etcd has
/// no such lease (it answers that with a TTL, not an error).
async fn lease_ttl(client: &Client, lease: i64) -> std::result::Result<i64, etcd_client::Error> {
    Ok(client.lease_client().time_to_live(lease, None).await?.ttl())
}

/// What one keep-alive came to.
enum KeepAlive {
    /// etcd extended the lease by its TTL.
    Alive,
    /// etcd no longer has the lease (expired or revoked): its keys are gone.
    Gone,
}

/// The range responses of a transaction, in order.
fn ranges(resp: &TxnResponse) -> Vec<Vec<KeyValue>> {
    resp.op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(mut get) => Some(get.take_kvs()),
            _ => None,
        })
        .collect()
}

impl Etcd {
    /// Runs `request`, bounded by the command timeout; an error or no answer also tells the wake
    /// hub that deliveries cannot be relied on, so that waiters poll until a watch is back.
    async fn bounded<T>(
        &self,
        what: &str,
        request: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        let outcome = match tokio::time::timeout(self.command_timeout, request).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => failed(what, e),
            Err(_) => Error::unanswered(BackendKind::Etcd, what, self.command_timeout),
        };
        if outcome.is_unavailable() {
            self.wake.set_connected(false);
        }
        Err(outcome)
    }

    /// One keep-alive of `lease`, bounded by the command timeout.
    async fn keep_alive(&self, lease: i64) -> Result<KeepAlive> {
        keep_alive_once(&self.client, lease, self.command_timeout).await
    }

    /// The acquire's state, made on its first attempt.
    fn contender(&self, hold: &Hold) -> Arc<tokio::sync::Mutex<Contender>> {
        let mut contenders = self.contenders.lock().unwrap();
        contenders
            .entry(hold.ticket.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Contender::new(&hold.keys.name))))
            .clone()
    }

    /// One attempt of the recipe for `hold` (see the module docs).
    async fn attempt(&self, hold: &Hold, token: &str, lease: Duration) -> Result<Grant> {
        let name = &hold.keys.name;
        let prefix = contenders_prefix(name);
        let contender = self.contender(hold);
        let mut ours = contender.lock().await;
        // Our lease must outlive the grant's local deadline, which counts from before this
        // attempt: a reused lease is kept alive first, a new one is granted now.
        if ours.ttl > 0 && matches!(self.keep_alive(ours.lease).await?, KeepAlive::Gone) {
            ours.start_over(name);
        }
        if ours.ttl == 0 {
            let grant = LeaseGrantOptions::new().with_id(ours.lease);
            match self.bounded("a lease grant", self.client.lease_client().grant(ttl_seconds(lease), Some(grant))).await
            {
                Ok(granted) => ours.ttl = granted.ttl().max(1),
                Err(e) => {
                    // It may exist without our knowing its start: never reuse it (unused, it
                    // expires by itself; a leave revokes the new one).
                    ours.start_over(name);
                    return Err(e);
                }
            }
        }
        let key = ours.key.clone();
        // A lock's key is empty; a candidate's holds its value, as Go's `Election.Campaign` puts it.
        let value = hold.leader_value().unwrap_or_default();
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key.as_str(), value, Some(PutOptions::new().with_lease(ours.lease))),
                TxnOp::get(prefix.as_str(), Some(by_create(SortOrder::Ascend))),
            ])
            .or_else([TxnOp::get(key.as_str(), None), TxnOp::get(prefix.as_str(), Some(by_create(SortOrder::Ascend)))]);
        let resp = self.bounded("an acquire", self.client.kv_client().txn(txn)).await?;
        let mut ranges = ranges(&resp);
        let revision = if resp.succeeded() {
            resp.header().map_or(0, |h| h.revision())
        } else {
            ranges.first().and_then(|kvs| kvs.first()).map_or(0, KeyValue::create_revision)
        };
        if revision <= 0 {
            return Err(Error::new(ErrorKind::Unavailable, "etcd: the acquire's answer has no revision"));
        }
        let owner = ranges.pop().and_then(|kvs| kvs.into_iter().next());
        if owner.is_none_or(|owner| owner.create_revision() == revision) {
            let owned = Owned { key, lease: ours.lease, revision };
            // The waiter's task stops with its state; the grant is now the token's.
            ours.waiting = None;
            drop(ours);
            self.contenders.lock().unwrap().remove(&hold.ticket);
            self.grants.lock().unwrap().insert(token.to_owned(), owned);
            return Ok(Grant::Granted(Fence::new(revision.unsigned_abs())));
        }
        // Someone else holds it: wait for our predecessor only (Go's waitDeletes).
        let before = by_create(SortOrder::Descend).with_max_create_revision(revision - 1);
        let found = self.bounded("a read of the queue", self.client.kv_client().get(prefix, Some(before))).await?;
        let Some(predecessor) = found.kvs().first() else {
            // Gone since the transaction: try again at once.
            return Ok(Grant::Held(Some(Duration::ZERO)));
        };
        let watch = Waiting {
            client: self.client.clone(),
            wake: self.wake.clone(),
            channel: hold.waiter_channel(),
            lease: ours.lease,
            ttl: Duration::from_secs(ours.ttl.unsigned_abs()),
            predecessor: predecessor.key().to_vec(),
            predecessor_created: predecessor.create_revision(),
            timeout: self.command_timeout,
        };
        ours.waiting = Some(AbortOnDrop(tokio::spawn(watch.run())));
        Ok(Grant::Held(None))
    }

    /// Deletes `key` if it is still under `lease`, then revokes the lease (which deletes any key
    /// still under it). Lease not found: already gone.
    async fn delete_and_revoke(&self, key: &str, lease: i64) -> Result<bool> {
        let txn = Txn::new().when([Compare::lease(key, CompareOp::Equal, lease)]).and_then([TxnOp::delete(key, None)]);
        let deleted = self.bounded("a delete", self.client.kv_client().txn(txn)).await?.succeeded();
        self.revoke(lease).await?;
        Ok(deleted)
    }

    /// Revokes `lease`; lease not found: already gone.
    async fn revoke(&self, lease: i64) -> Result<()> {
        let revoke = async { self.client.lease_client().revoke(lease).await.map(drop) };
        match tokio::time::timeout(self.command_timeout, revoke).await {
            Ok(Err(e)) if lease_answer(&e) == LeaseAnswer::NotFound => Ok(()),
            Ok(outcome) => outcome.map_err(|e| failed("a lease revoke", e)),
            Err(_) => Err(Error::unanswered(BackendKind::Etcd, "a lease revoke", self.command_timeout)),
        }
    }

    /// Every key that looks like a lock contender (`NAME/<hex of its own lease>`) in the range
    /// the pattern's literal start allows, with its name.
    async fn contenders_matching(&self, pattern: &str) -> Result<BTreeMap<String, Vec<KeyValue>>> {
        let literal = glob::literal_prefix(pattern);
        let end = if literal.is_empty() { vec![0] } else { prefix_end(literal.as_bytes()) };
        let mut start = if literal.is_empty() { vec![0] } else { literal.into_bytes() };
        let mut names: BTreeMap<String, Vec<KeyValue>> = BTreeMap::new();
        loop {
            let page = GetOptions::new().with_range(end.clone()).with_keys_only().with_limit(PAGE);
            let mut resp = self.bounded("a listing", self.client.kv_client().get(start.clone(), Some(page))).await?;
            let more = resp.more();
            let kvs = resp.take_kvs();
            let Some(last) = kvs.last() else { break };
            start = last.key().to_vec();
            start.push(0);
            for kv in kvs {
                let Ok(key) = kv.key_str() else { continue };
                let Some((name, id)) = key.rsplit_once('/') else { continue };
                if kv.lease() != 0
                    && id == format!("{:x}", kv.lease())
                    && !name.is_empty()
                    && glob::matches(pattern, name)
                {
                    names.entry(name.to_owned()).or_default().push(kv);
                }
            }
            if !more {
                break;
            }
        }
        Ok(names)
    }

    /// Time left to `lease` by etcd's clock, if it still exists.
    async fn time_left(&self, lease: i64) -> Result<Option<Duration>> {
        let ttl = self.bounded("a lease lookup", self.client.lease_client().time_to_live(lease, None)).await?.ttl();
        Ok((ttl > 0).then(|| Duration::from_secs(ttl.unsigned_abs())))
    }
}

/// The first key after every key that starts with `prefix` (etcd's prefix range end).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff: to the end of the keyspace.
    vec![0]
}

/// One keep-alive of `lease`: a keep-alive stream opened for one request and its answer.
async fn keep_alive_once(client: &Client, lease: i64, timeout: Duration) -> Result<KeepAlive> {
    let once = async {
        let refused = match client.lease_client().keep_alive(lease).await {
            Ok(_) => return Ok(KeepAlive::Alive),
            Err(e) => e,
        };
        match lease_answer(&refused) {
            LeaseAnswer::NotFound => Ok(KeepAlive::Gone),
            LeaseAnswer::Failed => Err(failed("a lease keep-alive", refused)),
            LeaseAnswer::AskEtcd => match lease_ttl(client, lease).await {
                // Negative: no such lease, or expired and about to be revoked.
                Ok(ttl) if ttl < 0 => Ok(KeepAlive::Gone),
                Ok(_) => Err(failed("a lease keep-alive", refused)),
                Err(e) if lease_answer(&e) == LeaseAnswer::NotFound => Ok(KeepAlive::Gone),
                Err(e) => Err(failed("a lease time-to-live", e)),
            },
        }
    };
    tokio::time::timeout(timeout, once)
        .await
        .unwrap_or_else(|_| Err(Error::unanswered(BackendKind::Etcd, "a lease keep-alive", timeout)))
}

/// A waiter between attempts: watches its predecessor's key for a delete and keeps its own lease
/// alive.
struct Waiting {
    client: Client,
    wake: WakeHub,
    channel: String,
    lease: i64,
    ttl: Duration,
    predecessor: Vec<u8>,
    /// The predecessor's create revision, as the read that found it saw it.
    predecessor_created: i64,
    timeout: Duration,
}

impl Waiting {
    async fn run(self) {
        tokio::join!(self.watch(), self.keep_alive());
    }

    /// Wakes the waiter when its predecessor is deleted, or when the watch cannot tell any more
    /// (it broke, or was cancelled by a compaction): it retries and watches anew. A broken watch
    /// also says deliveries cannot be relied on, until a new one is created.
    ///
    /// The watch starts at etcd's current revision, and the predecessor is looked up again once
    /// etcd confirmed it: a delete before that look-up is seen by it, a later one by the watch.
    /// Go's `waitDelete` instead watches from the revision of the read that found the
    /// predecessor, which misses nothing without the second look-up, but etcd catches up a watch
    /// that starts in the past only every 100 ms ("unsynced" watches): a delete meanwhile reached
    /// the waiter up to 100 ms late, and contended handovers took about that long (21 pairs/s at
    /// C=16, 16 at C=3).
    async fn watch(&self) {
        let options = WatchOptions::new().with_filters([WatchFilterType::NoPut]);
        let mut watcher = self.client.watch_client();
        let watch = watcher.watch(self.predecessor.clone(), Some(options));
        let mut stream = match tokio::time::timeout(self.timeout, watch).await {
            Ok(Ok(stream)) => stream,
            _ => return self.broken(),
        };
        loop {
            match stream.message().await {
                Ok(Some(resp)) => {
                    let deleted = resp.events().iter().any(|e| e.event_type() == EventType::Delete);
                    if resp.canceled() || deleted {
                        self.wake.deliver_all(&self.channel);
                        return;
                    }
                    if resp.created() {
                        self.wake.set_connected(true);
                        match self.predecessor_present().await {
                            Some(true) => {}
                            Some(false) => return self.wake.deliver_all(&self.channel),
                            None => return self.broken(),
                        }
                    }
                }
                Ok(None) | Err(_) => return self.broken(),
            }
        }
    }

    /// Whether the predecessor's key is still the one the waiter saw; `None` without an answer.
    async fn predecessor_present(&self) -> Option<bool> {
        let mut kv = self.client.kv_client();
        let found = tokio::time::timeout(self.timeout, kv.get(self.predecessor.clone(), None)).await.ok()?.ok()?;
        Some(found.kvs().first().is_some_and(|kv| kv.create_revision() == self.predecessor_created))
    }

    fn broken(&self) {
        self.wake.set_connected(false);
        self.wake.deliver_all(&self.channel);
    }

    /// Keeps the waiter's lease alive every third of its TTL; if etcd lost it, the waiter retries
    /// (and starts over with a new lease).
    async fn keep_alive(&self) {
        let every = (self.ttl / 3).max(Duration::from_millis(300));
        loop {
            tokio::time::sleep(every).await;
            if let Ok(KeepAlive::Gone) = keep_alive_once(&self.client, self.lease, self.timeout).await {
                self.wake.deliver_all(&self.channel);
                return;
            }
        }
    }
}

impl Backend for Etcd {
    fn kind(&self) -> BackendKind {
        BackendKind::Etcd
    }

    fn ping(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.bounded("a status request", self.client.maintenance_client().status()).await?;
            Ok(())
        })
    }

    fn acquire<'a>(
        &'a self,
        hold: &'a Arc<Hold>,
        token: &'a str,
        lease: Duration,
        _jobs: &'a Jobs,
    ) -> BoxFuture<'a, Result<Grant>> {
        // Cancel safety comes from `leave` (see the module docs): the acquire loop runs it in the
        // background whenever an acquire ends without a grant, dropped or not.
        Box::pin(async move { self.attempt(hold, token, lease).await })
    }

    fn release<'a>(&'a self, _hold: &'a Hold, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            // Kept until answered, so that a release dropped mid-flight can be finished.
            let Some(owned) = self.grants.lock().unwrap().get(token).cloned() else { return Ok(false) };
            let txn = Txn::new()
                .when([Compare::create_revision(owned.key.as_str(), CompareOp::Equal, owned.revision)])
                .and_then([TxnOp::delete(owned.key.as_str(), None)]);
            let held = self.bounded("a release", self.client.kv_client().txn(txn)).await?.succeeded();
            if let Err(e) = self.revoke(owned.lease).await {
                tracing::debug!(error = %e, "could not revoke a released lock's lease; it expires by itself");
            }
            self.grants.lock().unwrap().remove(token);
            Ok(held)
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal<'a>]) -> BoxFuture<'a, Result<Vec<Renewed>>> {
        Box::pin(async move {
            let renewals = batch.iter().map(|renewal| async move {
                let Some(lease) = self.grants.lock().unwrap().get(renewal.token).map(|o| o.lease) else {
                    return Renewed::Gone;
                };
                match self.keep_alive(lease).await {
                    Ok(KeepAlive::Alive) => Renewed::Extended,
                    Ok(KeepAlive::Gone) => Renewed::Gone,
                    Err(_) => Renewed::Unanswered,
                }
            });
            Ok(join_all(renewals).await)
        })
    }

    fn raise_fence<'a>(&'a self, keys: &'a LockKeys, at_least: Fence) -> BoxFuture<'a, Result<Fence>> {
        Box::pin(async move {
            // Fences are create revisions: every later grant's is above the cluster's revision now.
            let mut kv = self.client.kv_client();
            let read = kv.get(contenders_prefix(&keys.name), Some(GetOptions::new().with_count_only()));
            let revision = self.bounded("a revision read", read).await?.header().map_or(0, |h| h.revision());
            let current = Fence::new(revision.unsigned_abs());
            if current >= at_least {
                return Ok(current);
            }
            Err(Error::unsupported(format!(
                "etcd fences are the cluster's revisions, which only writes advance: cannot raise lock {:?}'s \
                     fence to {at_least} (the revision is {current})",
                keys.name
            )))
        })
    }

    fn inspect<'a>(&'a self, _prefix: &'a str, pattern: &'a str) -> BoxFuture<'a, Result<Vec<LockInfo>>> {
        Box::pin(async move {
            let mut infos = Vec::new();
            for (name, mut kvs) in self.contenders_matching(pattern).await? {
                kvs.sort_by_key(KeyValue::create_revision);
                let mut holders = Vec::new();
                let mut queue = Vec::new();
                for (i, kv) in kvs.iter().enumerate() {
                    // A contender is shown by its create revision: public, and unlike its lease
                    // id it cannot revoke anything.
                    let id = kv.create_revision().to_string();
                    let left = self.time_left(kv.lease()).await?;
                    if i == 0 {
                        holders.push(Holder { role: HolderRole::Lock, id, ttl: left });
                    } else {
                        queue.push(Waiter { id, deadline: left.unwrap_or_default() });
                    }
                }
                let owner = &kvs[0];
                infos.push(LockInfo {
                    name,
                    held: true,
                    ttl: holders[0].ttl,
                    fence: Some(Fence::new(owner.create_revision().unsigned_abs())),
                    kind: LockKind::Plain,
                    holders,
                    owner: None,
                    permits: None,
                    queue,
                    writer_waiting: None,
                    delay: None,
                });
            }
            Ok(infos)
        })
    }

    fn wake(&self) -> &WakeHub {
        &self.wake
    }

    fn wake_channel(&self, hold: &Hold) -> String {
        hold.waiter_channel()
    }

    fn watch_leader<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<Option<BoxFuture<'static, ()>>>> {
        Box::pin(async move {
            // Go's `Election.Observe` watches the prefix too: every candidate's put and delete.
            let mut watcher = self.client.watch_client();
            let options = WatchOptions::new().with_prefix();
            let mut stream =
                self.bounded("a watch", watcher.watch(contenders_prefix(&keys.name), Some(options))).await?;
            // Armed once etcd confirms it: every later change is delivered.
            match self.bounded("a watch", stream.message()).await? {
                Some(created) if created.created() => {}
                _ => return Ok(None),
            }
            let changed: BoxFuture<'static, ()> = Box::pin(async move {
                let _ = stream.message().await;
            });
            Ok(Some(changed))
        })
    }

    fn leader<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<Option<Leader>>> {
        Box::pin(async move {
            // Go's `Election.Leader`: the key with the lowest create revision under `NAME/`.
            let first = by_create(SortOrder::Ascend);
            let mut kv = self.client.kv_client();
            let found = self.bounded("a leader read", kv.get(contenders_prefix(&keys.name), Some(first))).await?;
            let Some(kv) = found.kvs().first() else { return Ok(None) };
            let value = String::from_utf8_lossy(kv.value()).into_owned();
            Ok(Some(Leader::new(value, Fence::new(kv.create_revision().unsigned_abs()))))
        })
    }

    fn must_leave(&self, hold: &Hold) -> bool {
        hold.is_plain_lock()
    }

    fn leave<'a>(&'a self, hold: &'a Hold) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let Some(contender) = self.contenders.lock().unwrap().remove(&hold.ticket) else { return Ok(()) };
            let mut ours = contender.lock().await;
            ours.waiting = None;
            self.delete_and_revoke(&ours.key, ours.lease).await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_named_as_etcds_go_mutex_names_them() {
        assert_eq!(lock_key("jobs", 0x694d_7a1b_2c3d_4e5f), "jobs/694d7a1b2c3d4e5f");
        assert_eq!(contenders_prefix("jobs"), "jobs/");
    }

    #[test]
    fn leases_round_up_to_whole_seconds() {
        assert_eq!(ttl_seconds(Duration::from_millis(10)), 1);
        assert_eq!(ttl_seconds(Duration::from_secs(2)), 2);
        assert_eq!(ttl_seconds(Duration::from_millis(2001)), 3);
    }

    /// etcd-client 0.21 words a keep-alive's TTL 0 as "lease not found", and its closed request
    /// stream as "channel closed"; a lease used to be judged gone when the message said "not
    /// found". The message never decides now: the client's message-only error asks etcd, and any
    /// other error says nothing about the lease, whatever its text.
    #[test]
    fn a_lease_is_never_judged_by_an_error_message() {
        use etcd_client::Error as E;
        for message in ["lease not found", "lease expired or revoked", "channel closed: receiver not found"] {
            assert_eq!(lease_answer(&E::LeaseKeepAliveError(message.into())), LeaseAnswer::AskEtcd, "{message}");
        }
        for e in [E::WatchError("lease not found".into()), E::Internal("not found".into())] {
            assert_eq!(lease_answer(&e), LeaseAnswer::Failed, "{e}");
        }
    }

    #[test]
    fn prefix_ranges_end_after_the_prefix() {
        assert_eq!(prefix_end(b"ab"), b"ac");
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b");
        assert_eq!(prefix_end(&[0xff]), vec![0]);
    }
}
