//! Leader election on every backend, as Curator's `LeaderLatch` and etcd's `concurrency.Election`
//! do it: [`Election`] (campaign, read the leader, observe), [`Leadership`] (the leader's handle)
//! and [`Observer`] (a follower's view of changes).
//!
//! An election is a lock that carries a value. [`Election::campaign`] waits for the lock of the
//! election's name, exactly as [`LockClient::lock`] waits (same wait loop, same watchdog, same
//! guard), and stores the candidate's value where followers can read it for as long as the lease
//! lasts. The leader's [`term`](Leadership::term) is the fence of that lock: every later leader's
//! term is larger, so a store that refuses writes carrying a smaller term than it has seen
//! refuses a deposed leader's writes, as it refuses any stale holder's. Leadership ends when the
//! lease is lost ([`Leadership::lost`], the same signal as [`LockGuard::lost`](crate::LockGuard::lost))
//! or on [`Leadership::resign`]; either way the value goes with the lease.
//!
//! # Where each backend keeps the leader
//!
//! | backend | the leader | its value | its term |
//! |---|---|---|---|
//! | one Redis, Redis Cluster | the holder of the lock `{prefix:NAME}` | the hash `{prefix:NAME}:leader` (`token`, `value`), set with the lock by one script, extended and deleted with it | the lock's fence (`{prefix:NAME}:fence`) |
//! | Redlock | the same, on a majority of the nodes | the same hash on each node; a follower reads every node and believes the value a majority agrees on | the grant's fence (the largest counter of the majority, written back) |
//! | ZooKeeper | the lowest of the EPHEMERAL_SEQUENTIAL nodes `_c_<guid>-latch-<sequence>` under `<chroot>/NAME`: Curator's `LeaderLatch` layout | the node's data (Curator's participant id) | the node's `czxid` |
//! | etcd | the key with the lowest create revision under `NAME/`: etcd's `concurrency.Election` layout, so `etcdctl elect NAME` campaigns and observes with lockkit | the key `NAME/<lease id in hex>`'s value, put under the candidate's lease | the key's create revision |
//! | PostgreSQL lease table | the holder of the row `NAME` of `<prefix>_locks` | the row's `value` column, written by the statement that grants the lock and cleared by its release; followers believe it only while the row holds a token and has not expired | the grant's fence |
//! | PostgreSQL advisory locks | the session holding the advisory lock of `<prefix>:NAME` | the same `<prefix>_leaders` row, with the holding session's pid; followers believe it only while that session still holds the advisory lock (`pg_locks`) | the grant's fence |
//!
//! On Redis, etcd and the PostgreSQL lease table the value appears atomically with the grant (one
//! script, one transaction, one statement), on ZooKeeper with the node. With advisory locks the
//! row is written right after the grant, before `campaign` returns: a follower may see "no
//! leader" for that one round trip.
//!
//! # Watching
//!
//! On ZooKeeper and etcd, [`Observer::changed`] watches the candidates (a child watch on the
//! election's node; a watch of the `NAME/` prefix, as Go's `Election.Observe` does) and reads the
//! leader again at every change, with a read every ten poll intervals as a safety net. Redis and
//! PostgreSQL have no watch of a key's creation that lockkit uses: there it reads the leader again
//! when a release of the lock is announced (Redis pub/sub, PostgreSQL `NOTIFY`), and otherwise
//! every [`poll_interval`](Election::poll_interval) (500 ms unless set), since a new leader's
//! grant announces nothing and neither does a lease that ends by expiry. So there a change is
//! seen within the poll interval at the latest.
//!
//! # What it guarantees
//!
//! At most one candidate holds the lock at a time, under the lock's rules (a leader paused past
//! its lease may still believe it leads until its next check: [`Leadership::ensure_held`] reads
//! the local deadline, and the store's check of the term is what refuses its writes).

mod leadership;
mod observer;

use std::time::Duration;

pub use self::{leadership::Leadership, observer::Observer};
use crate::{
    Acquire, LockClient,
    model::{error::Result, hold::HoldKind, keys::LockKeys, leader::Leader},
};

/// How long one acquire of a campaign waits before the campaign starts another; only bounds
/// the arithmetic of deadlines (a campaign waits as long as it takes).
const CAMPAIGN_ROUND: Duration = Duration::from_secs(3600);

/// How often an [`Observer`] reads the leader when nothing announced a change.
const DEFAULT_POLL: Duration = Duration::from_millis(500);

/// An election named `name` on one [`LockClient`]'s backend. Cheap to clone.
///
/// ```no_run
/// # async fn demo(client: lockkit::LockClient) -> lockkit::Result<()> {
/// let election = client.election("scheduler");
/// let leadership = election.campaign("worker-7").await?; // waits until this one leads
/// tokio::select! {
///     cause = leadership.lost() => eprintln!("deposed ({cause:?})"),
///     () = lead(leadership.term()) => {}
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// # async fn lead(_: lockkit::Fence) {}
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    client: LockClient,
    name: String,
    poll: Duration,
}

impl LockClient {
    /// The leader election `name` (see [`Election`]). On etcd and ZooKeeper the name is the key
    /// prefix or node path, as in etcd's and Curator's recipes.
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election { client: self.clone(), name: name.into(), poll: DEFAULT_POLL }
    }
}

impl Election {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How often an [`Observer`] reads the leader when no release was announced, on the backends
    /// without a watch (default 500 ms, at least 10 ms; ten times as long on ZooKeeper and etcd,
    /// where a watch reports the changes).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll = interval.max(Duration::from_millis(10));
        self
    }

    /// Waits, as long as it takes, until this candidate leads, and stores `value` as the leader's
    /// value for followers to read. The lease is the client's default lease, renewed by the
    /// watchdog. Fails only on what waiting cannot fix (a name the backend refuses, an
    /// unavailable server at the end of a round of waiting); cancel-safe like an acquire.
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let value = value.into();
        loop {
            let kind = HoldKind::Leader { value: value.clone() };
            match Acquire::of(self.client.core(), &self.name, kind).wait(CAMPAIGN_ROUND).await {
                Ok(guard) => return Ok(Leadership::new(guard, value)),
                Err(e) if e.is_timeout() => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The current leader, if any: one read.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let keys = LockKeys::new(self.client.prefix(), &self.name)?;
        self.client.core().backend.leader(&keys).await
    }

    /// A follower's view: [`Observer::changed`] returns the leader each time it changes.
    pub fn observe(&self) -> Observer {
        Observer::new(self.clone())
    }

    pub(crate) fn client(&self) -> &LockClient {
        &self.client
    }

    pub(crate) fn poll(&self) -> Duration {
        self.poll
    }
}
