//! `postgres+advisory://`: session advisory locks, keyed by `hashtextextended('<prefix>:<name>',
//! 0)` (see the [module doc](super) for the recipe, its guarantee and the failure rule).
//!
//! A granted lock pins its session until the release: the session *is* the lock. Sessions of
//! refused attempts hold nothing and are kept for the next attempt.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use futures_util::future::join_all;
use tokio::time::Instant;
use tokio_postgres::{Client, types::Type};

use super::{Names, Server, Shared, bounded};
use crate::{
    backend::{Backend, BoxFuture, UndoOnCancel},
    jobs::Jobs,
    model::{
        backend_kind::BackendKind,
        error::{Error, Result},
        fence::Fence,
        grant::{Grant, Renewal, Renewed},
        hold::Hold,
        keys::LockKeys,
        leader::Leader,
        lock_info::{Holder, HolderRole, LockInfo, LockKind},
    },
    wake::WakeHub,
};

/// The advisory lock.
pub(super) struct PgAdvisory {
    shared: Shared,
    server: Server,
    sql: Arc<Statements>,
    /// The sessions that hold a lock, by the token of the grant. Shared with the expiry tasks.
    held: Arc<Mutex<HashMap<String, Arc<Pinned>>>>,
    /// Sessions that hold nothing, for the next attempt (at most `keep_idle`): waiters retry often,
    /// and a connection costs a process on the server.
    idle: Mutex<Vec<Arc<Client>>>,
    keep_idle: usize,
}

impl fmt::Debug for PgAdvisory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self.held.lock().unwrap().len();
        f.debug_struct("PgAdvisory").field("sequence", &self.shared.names.sequence).field("held", &held).finish()
    }
}

/// A session that holds one lock.
struct Pinned {
    client: Arc<Client>,
    name: String,
    /// When the client lets the lock go unless a renewal came: the end of the lease (the server
    /// keeps a session lock forever, so a fixed lease, or a watchdog that stopped, ends here).
    deadline: Mutex<Instant>,
}

/// The statements, with the sequence and channel spliced in once. `$1` is always the key text
/// `<prefix>:<name>`.
struct Statements {
    /// → the fence if the lock was taken (also shown in the session's `application_name`, for
    /// operators and for [`inspect`](Backend::inspect)), NULL if someone holds it.
    try_lock: String,
    /// → whether this session still holds the lock.
    holds: String,
    /// `$2` the name → whether this session held the lock; wakes waiters.
    release: String,
    /// `$1` the name (not the key): the undo of an abandoned attempt (whether or not it took the
    /// lock); wakes waiters.
    undo: String,
    /// → the backend pid and `application_name` of the session holding the lock, if any.
    holder: String,
    /// `$2` the name, `$3` the fence, `$4` the value: records this session as the name's leader
    /// (election), right after its grant.
    proclaim: String,
    /// `$2` the name → the leader's value and fence, if the session that recorded it still holds
    /// the lock under that fence (its `application_name` carries the fence of its grant).
    leader: String,
}

/// The 32-bit halves of the key, as `pg_locks` shows an advisory lock on a `bigint`.
const KEY_MATCHES: &str = "l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
     AND l.classid::bigint = (k >> 32) & 4294967295 AND l.objid::bigint = k & 4294967295";

impl Statements {
    fn new(names: &Names) -> Self {
        let Names { sequence, channel, leaders, .. } = names;
        Self {
            try_lock: format!(
                "SELECT f, CASE WHEN f IS NOT NULL THEN set_config('application_name',
                   regexp_replace(current_setting('application_name'), ' fence [0-9]+$', '') || ' fence ' || f, false)
                 END
                 FROM (SELECT CASE WHEN pg_try_advisory_lock(hashtextextended($1, 0)) THEN nextval('{sequence}') END
                       AS f OFFSET 0) attempt"
            ),
            holds: format!(
                "SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = pg_backend_pid() AND {KEY_MATCHES})
                 FROM (SELECT hashtextextended($1, 0) AS k) key"
            ),
            release: format!(
                "SELECT pg_advisory_unlock(hashtextextended($1, 0)), pg_notify('{channel}', $2),
                   set_config('application_name',
                     regexp_replace(current_setting('application_name'), ' fence [0-9]+$', ''), false)"
            ),
            undo: format!("SELECT pg_advisory_unlock_all(), pg_notify('{channel}', $1)"),
            holder: format!(
                "SELECT l.pid, a.application_name FROM (SELECT hashtextextended($1, 0) AS k) key, pg_locks l
                   LEFT JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE {KEY_MATCHES} AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ),
            proclaim: format!(
                "INSERT INTO {leaders} (name, pid, fence, value) VALUES ($1, pg_backend_pid(), $2, $3)
                 ON CONFLICT (name) DO UPDATE SET pid = excluded.pid, fence = excluded.fence, value = excluded.value"
            ),
            leader: format!(
                "SELECT r.value, r.fence FROM (SELECT hashtextextended($1, 0) AS k) key, pg_locks l
                   JOIN pg_stat_activity a ON a.pid = l.pid
                   JOIN {leaders} r ON r.pid = l.pid AND a.application_name LIKE '% fence ' || r.fence
                 WHERE {KEY_MATCHES} AND r.name = $2
                   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ),
        }
    }
}

impl PgAdvisory {
    /// Records the session `client`, just granted `name` under `fence`, as its leader with `value`.
    async fn proclaim(&self, client: &Client, name: &str, fence: i64, value: &str) -> Result<()> {
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 3] =
            [(&name, Type::TEXT), (&fence, Type::INT8), (&value, Type::TEXT)];
        bounded("a leader's record", self.shared.timeout, client.query_typed(&self.sql.proclaim, &params)).await?;
        Ok(())
    }

    pub(super) fn new(shared: Shared, server: Server, keep_idle: usize) -> Self {
        let sql = Arc::new(Statements::new(&shared.names));
        Self { shared, server, sql, held: Arc::default(), idle: Mutex::new(Vec::new()), keep_idle }
    }

    /// A session that holds nothing: a kept one, or a new one.
    async fn session(&self) -> Result<Arc<Client>> {
        loop {
            let kept = self.idle.lock().unwrap().pop();
            match kept {
                Some(client) if !client.is_closed() => return Ok(client),
                Some(_) => continue,
                None => return Ok(Arc::new(self.server.client().await?)),
            }
        }
    }

    /// Keeps a session that holds nothing for the next attempt, or closes it.
    fn put_back(&self, client: Arc<Client>) {
        let mut idle = self.idle.lock().unwrap();
        if idle.len() < self.keep_idle && !client.is_closed() {
            idle.push(client);
        }
    }

    /// Forgets the session of `token` (closing it, which ends its locks on the server).
    fn forget(&self, token: &str) {
        self.held.lock().unwrap().remove(token);
    }

    /// Lets the lock of `token` go when its lease ends without a renewal.
    fn expire_later(&self, token: String, pinned: Weak<Pinned>) {
        let (held, sql, timeout, key) =
            (self.held.clone(), self.sql.clone(), self.shared.timeout, self.shared.names.clone());
        tokio::spawn(async move {
            loop {
                let Some(deadline) = pinned.upgrade().map(|p| *p.deadline.lock().unwrap()) else { return };
                tokio::time::sleep_until(deadline).await;
                match pinned.upgrade() {
                    None => return,
                    Some(p) if *p.deadline.lock().unwrap() <= Instant::now() => break,
                    Some(_) => {}
                }
            }
            let expired = {
                let mut held = held.lock().unwrap();
                match held.get(&token) {
                    Some(p) if Weak::ptr_eq(&Arc::downgrade(p), &pinned) => held.remove(&token),
                    _ => None,
                }
            };
            if let Some(p) = expired {
                tracing::debug!(lock = %p.name, "advisory lease ended without a renewal; unlocking");
                let key = key.advisory_key(&p.name);
                let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 2] =
                    [(&key, Type::TEXT), (&p.name, Type::TEXT)];
                // Closing the session (when `p` drops) releases the lock anyway.
                let _ = tokio::time::timeout(timeout, p.client.query_typed(&sql.release, &params)).await;
            }
        });
    }
}

/// Whether a failed statement means the session is gone (and with it its locks).
fn session_ended(e: &tokio_postgres::Error, client: &Client) -> bool {
    e.is_closed()
        || client.is_closed()
        || e.as_db_error().is_some_and(|db| matches!(db.severity(), "FATAL" | "PANIC") || db.code().code() == "57P01")
}

impl Backend for PgAdvisory {
    fn kind(&self) -> BackendKind {
        BackendKind::PostgresAdvisory
    }

    fn ping(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(super::ping(&self.shared))
    }

    fn acquire<'a>(
        &'a self,
        hold: &'a Arc<Hold>,
        token: &'a str,
        lease: Duration,
        jobs: &'a Jobs,
    ) -> BoxFuture<'a, Result<Grant>> {
        Box::pin(async move {
            let name = &hold.keys.name;
            let key = self.shared.names.advisory_key(name);
            let client = self.session().await?;
            // Abandoned after the try-lock may have run: unlock on the same session (so after the
            // try-lock), wake waiters, and close the session.
            let mut undo = {
                let (client, sql, name) = (client.clone(), self.sql.clone(), name.clone());
                let timeout = self.shared.timeout;
                UndoOnCancel::new(jobs, move || {
                    Box::pin(async move {
                        let _ =
                            tokio::time::timeout(timeout, client.query_typed(&sql.undo, &[(&name, Type::TEXT)])).await;
                    })
                })
            };
            let row = bounded(
                "an acquire",
                self.shared.timeout,
                client.query_typed_one(&self.sql.try_lock, &[(&key, Type::TEXT)]),
            )
            .await?;
            let Some(fence) = row.get::<_, Option<i64>>(0) else {
                undo.disarm();
                self.put_back(client);
                return Ok(Grant::Held(None));
            };
            // Still armed: a failed or abandoned proclamation unlocks (a leader nobody can read is
            // no leader).
            if let Some(value) = hold.leader_value() {
                self.proclaim(&client, name, fence, value).await?;
            }
            undo.disarm();
            let pinned = Arc::new(Pinned { client, name: name.clone(), deadline: Mutex::new(Instant::now() + lease) });
            self.expire_later(token.to_owned(), Arc::downgrade(&pinned));
            self.held.lock().unwrap().insert(token.to_owned(), pinned);
            Ok(Grant::Granted(Fence::new(fence as u64)))
        })
    }

    fn release<'a>(&'a self, hold: &'a Hold, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let Some(pinned) = self.held.lock().unwrap().remove(token) else { return Ok(false) };
            let key = self.shared.names.advisory_key(&hold.keys.name);
            let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 2] =
                [(&key, Type::TEXT), (&hold.keys.name, Type::TEXT)];
            let outcome =
                bounded("a release", self.shared.timeout, pinned.client.query_typed_one(&self.sql.release, &params))
                    .await;
            match outcome {
                Ok(row) => {
                    let released: bool = row.get(0);
                    if released {
                        self.put_back(pinned.client.clone());
                    }
                    Ok(released)
                }
                // The session ended: the server released the lock with it.
                Err(_) if pinned.client.is_closed() => Ok(false),
                // Dropping the session closes it, which releases the lock on a live server.
                Err(e) => Err(e),
            }
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal<'a>]) -> BoxFuture<'a, Result<Vec<Renewed>>> {
        Box::pin(async move {
            let renewals = batch.iter().map(|r| async move {
                let pinned = self.held.lock().unwrap().get(r.token).cloned();
                let Some(pinned) = pinned else { return Renewed::Gone };
                let key = self.shared.names.advisory_key(&r.hold.keys.name);
                let sent_at = Instant::now();
                let timeout = self.shared.timeout;
                match tokio::time::timeout(
                    timeout,
                    pinned.client.query_typed_one(&self.sql.holds, &[(&key, Type::TEXT)]),
                )
                .await
                {
                    Ok(Ok(row)) if row.get::<_, bool>(0) => {
                        let mut deadline = pinned.deadline.lock().unwrap();
                        *deadline = (*deadline).max(sent_at + r.lease);
                        Renewed::Extended
                    }
                    Ok(Ok(_)) => {
                        self.forget(r.token);
                        Renewed::Gone
                    }
                    Ok(Err(e)) if session_ended(&e, &pinned.client) => {
                        self.forget(r.token);
                        Renewed::Gone
                    }
                    Ok(Err(_)) | Err(_) => Renewed::Unanswered,
                }
            });
            Ok(join_all(renewals).await)
        })
    }

    fn raise_fence<'a>(&'a self, _keys: &'a LockKeys, at_least: Fence) -> BoxFuture<'a, Result<Fence>> {
        Box::pin(super::raise_fence(&self.shared, at_least))
    }

    fn inspect<'a>(&'a self, _prefix: &'a str, pattern: &'a str) -> BoxFuture<'a, Result<Vec<LockInfo>>> {
        Box::pin(async move {
            if crate::glob::is_pattern(pattern) {
                return Err(Error::unsupported(
                    "advisory locks are keyed by a hash of the name, so they cannot be listed by pattern: inspect \
                     one exact name",
                ));
            }
            let key = self.shared.names.advisory_key(pattern);
            let rows = self
                .shared
                .pool
                .run("an inspection", async |c| c.query_typed(&self.sql.holder, &[(&key, Type::TEXT)]).await)
                .await?;
            Ok(rows
                .first()
                .map(|row| {
                    let (pid, application): (i32, Option<String>) = (row.get(0), row.get(1));
                    let fence = application
                        .as_deref()
                        .and_then(|a| a.rsplit_once(" fence "))
                        .and_then(|(_, f)| f.parse::<u64>().ok())
                        .map(Fence::new);
                    LockInfo {
                        name: pattern.to_owned(),
                        held: true,
                        ttl: None,
                        fence,
                        kind: LockKind::Plain,
                        // The holder's backend pid (what `pg_terminate_backend` takes): the token
                        // never reaches the server in this mode.
                        holders: vec![Holder { role: HolderRole::Lock, id: format!("pid:{pid}"), ttl: None }],
                        owner: None,
                        permits: None,
                        queue: Vec::new(),
                        writer_waiting: None,
                        delay: None,
                    }
                })
                .into_iter()
                .collect())
        })
    }

    fn wake(&self) -> &WakeHub {
        &self.shared.wake
    }

    fn leader<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<Option<Leader>>> {
        Box::pin(async move {
            let key = self.shared.names.advisory_key(&keys.name);
            let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 2] =
                [(&key, Type::TEXT), (&keys.name, Type::TEXT)];
            let rows =
                self.shared.pool.run("a leader read", async |c| c.query_typed(&self.sql.leader, &params).await).await?;
            Ok(rows.first().map(|row| Leader::new(row.get(0), Fence::new(row.get::<_, i64>(1) as u64))))
        })
    }
}
