//! `postgres://`: rows of a lease table timed by the server's clock (see the [module
//! doc](super) for the recipe, its guarantee and the failure rule). Every operation is one
//! statement on a command connection, so it also works through a transaction-pooling PgBouncer.

use std::{collections::HashSet, fmt, sync::Arc, time::Duration};

use tokio_postgres::types::Type;

use super::{Names, Shared};
use crate::{
    backend::{Backend, BoxFuture, UndoOnCancel},
    jobs::Jobs,
    model::{
        backend_kind::BackendKind,
        error::Result,
        fence::Fence,
        grant::{Grant, Renewal, Renewed},
        hold::Hold,
        keys::LockKeys,
        leader::Leader,
        lock_info::{Holder, HolderRole, LockInfo, LockKind},
    },
    wake::WakeHub,
};

/// The lease-table lock.
pub(super) struct PgLease {
    shared: Shared,
    sql: Statements,
}

impl fmt::Debug for PgLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgLease").field("table", &self.shared.names.table).finish_non_exhaustive()
    }
}

/// The statements, with the table, sequence and channel names spliced in once.
struct Statements {
    /// `$1` name, `$2` token, `$3` lease in ms, `$4` a leader's value (NULL for a lock) → (fence
    /// if granted, holder's ms left otherwise).
    /// The outer `SELECT` sees the statement's snapshot: the row a concurrent acquire inserted
    /// after it may be invisible, and then neither column is set (retry soon).
    acquire: String,
    /// `$1` name, `$2` token → 1 if our row was still unexpired, else 0. Frees our row even if
    /// expired (nobody took it yet) and then notifies the waiters. The row stays (token `''`,
    /// expired now): every grant after a name's first is then an `UPDATE` of that row, which takes
    /// its fence from the sequence only once it holds the row's lock, so fences follow the order of
    /// the grants. (An `INSERT` computes its `VALUES` before it finds its conflict: a fence drawn
    /// there could be older than one granted while it waited.)
    release: String,
    /// `$1` names, `$2` tokens, `$3` leases in ms → the (name, token) pairs still ours, extended.
    renew: String,
    /// `$1` the names' literal start → name, fence, token, ms left (negative when expired) of
    /// every lock taken and not released; the caller matches the whole pattern.
    inspect: String,
    /// `$1` name → the leader's value and fence, if a leader's lease is in force (election).
    leader: String,
}

impl Statements {
    fn new(names: &Names) -> Self {
        let Names { table, sequence, channel, .. } = names;
        Self {
            acquire: format!(
                "WITH granted AS (
                   INSERT INTO {table} AS l (name, token, fence, expires_at, value)
                   VALUES ($1, $2, nextval('{sequence}'), clock_timestamp() + $3 * interval '1 millisecond', $4)
                   ON CONFLICT (name) DO UPDATE
                     SET token = excluded.token, fence = nextval('{sequence}'), expires_at = excluded.expires_at,
                       value = excluded.value
                     WHERE l.expires_at <= clock_timestamp()
                   RETURNING l.fence)
                 SELECT (SELECT fence FROM granted) AS fence,
                   (SELECT ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
                      FROM {table} WHERE name = $1) AS ttl_ms"
            ),
            release: format!(
                "WITH ours AS (
                   SELECT name, expires_at FROM {table} WHERE name = $1 AND token = $2 FOR UPDATE),
                 released AS (
                   UPDATE {table} AS l SET token = '', expires_at = clock_timestamp(), value = NULL FROM ours
                   WHERE l.name = ours.name
                   RETURNING l.name, ours.expires_at > clock_timestamp() AS unexpired)
                 SELECT count(*) FILTER (WHERE unexpired)
                 FROM (SELECT pg_notify('{channel}', name), unexpired FROM released) notified"
            ),
            renew: format!(
                "UPDATE {table} AS l SET expires_at = clock_timestamp() + r.lease_ms * interval '1 millisecond'
                 FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(name, token, lease_ms)
                 WHERE l.name = r.name AND l.token = r.token AND l.expires_at > clock_timestamp()
                 RETURNING l.name, l.token"
            ),
            inspect: format!(
                "SELECT name, fence, token, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
                 FROM {table} WHERE starts_with(name, $1) AND token <> ''"
            ),
            leader: format!(
                "SELECT value, fence FROM {table}
                 WHERE name = $1 AND token <> '' AND value IS NOT NULL AND expires_at > clock_timestamp()"
            ),
        }
    }
}

impl PgLease {
    pub(super) fn new(shared: Shared) -> Self {
        let sql = Statements::new(&shared.names);
        Self { shared, sql }
    }
}

/// A lease in whole milliseconds, as the statements take it (at least 1).
fn millis(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// The first 8 hex digits of the SHA-1 of a token: the id [`Holder`] shows on every backend (the
/// Redis scripts compute the same with `redis.sha1hex`; the token never leaves this process).
fn short_id(token: &str) -> String {
    sha1_smol::Sha1::from(token).digest().to_string()[..8].to_owned()
}

impl Backend for PgLease {
    fn kind(&self) -> BackendKind {
        BackendKind::Postgres
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
            let pool = &self.shared.pool;
            let lane = pool.checkout().await?;
            let name = &hold.keys.name;
            // The undo goes over the same session, so it reaches the server after the acquire.
            let mut undo = {
                let (client, release, name, token) =
                    (lane.client.clone(), self.sql.release.clone(), name.clone(), token.to_owned());
                let timeout = self.shared.timeout;
                UndoOnCancel::new(jobs, move || {
                    Box::pin(async move {
                        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 2] =
                            [(&name, Type::TEXT), (&token, Type::TEXT)];
                        if !matches!(
                            tokio::time::timeout(timeout, client.query_typed(&release, &params)).await,
                            Ok(Ok(_))
                        ) {
                            tracing::warn!(lock = %name, "could not undo an abandoned acquire; it will expire");
                        }
                    })
                })
            };
            let lease_ms = millis(lease);
            let value = hold.leader_value();
            let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 4] =
                [(name, Type::TEXT), (&token, Type::TEXT), (&lease_ms, Type::INT8), (&value, Type::TEXT)];
            let row = super::bounded(
                "an acquire",
                self.shared.timeout,
                lane.client.query_typed_one(&self.sql.acquire, &params),
            )
            .await;
            pool.report(&lane, &row).await;
            // An error leaves `undo` armed: the statement may have run although its answer was lost.
            let row = row?;
            undo.disarm();
            let fence: Option<i64> = row.get(0);
            let ttl_ms: Option<i64> = row.get(1);
            Ok(match (fence, ttl_ms) {
                (Some(fence), _) => Grant::Granted(Fence::new(fence as u64)),
                (None, Some(ms)) => Grant::Held(Some(Duration::from_millis(ms.max(0) as u64))),
                // Granted to someone after this statement's snapshot: look again soon.
                (None, None) => Grant::Held(Some(Duration::ZERO)),
            })
        })
    }

    fn release<'a>(&'a self, hold: &'a Hold, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let name = &hold.keys.name;
            let deleted: i64 = self
                .shared
                .pool
                .run("a release", async |c| {
                    c.query_typed_one(&self.sql.release, &[(name, Type::TEXT), (&token, Type::TEXT)]).await?.try_get(0)
                })
                .await?;
            Ok(deleted > 0)
        })
    }

    fn renew<'a>(&'a self, batch: &'a [Renewal<'a>]) -> BoxFuture<'a, Result<Vec<Renewed>>> {
        Box::pin(async move {
            if batch.is_empty() {
                return Ok(Vec::new());
            }
            let names: Vec<&str> = batch.iter().map(|r| r.hold.keys.name.as_str()).collect();
            let tokens: Vec<&str> = batch.iter().map(|r| r.token).collect();
            let leases: Vec<i64> = batch.iter().map(|r| millis(r.lease)).collect();
            let rows = self
                .shared
                .pool
                .run("a lease renewal", async |c| {
                    c.query_typed(
                        &self.sql.renew,
                        &[(&names, Type::TEXT_ARRAY), (&tokens, Type::TEXT_ARRAY), (&leases, Type::INT8_ARRAY)],
                    )
                    .await
                })
                .await?;
            let ours: HashSet<(String, String)> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
            Ok(batch
                .iter()
                .map(|r| {
                    if ours.contains(&(r.hold.keys.name.clone(), r.token.to_owned())) {
                        Renewed::Extended
                    } else {
                        Renewed::Gone
                    }
                })
                .collect())
        })
    }

    fn raise_fence<'a>(&'a self, _keys: &'a LockKeys, at_least: Fence) -> BoxFuture<'a, Result<Fence>> {
        Box::pin(super::raise_fence(&self.shared, at_least))
    }

    fn inspect<'a>(&'a self, _prefix: &'a str, pattern: &'a str) -> BoxFuture<'a, Result<Vec<LockInfo>>> {
        Box::pin(async move {
            let prefix = crate::glob::literal_prefix(pattern);
            let rows = self
                .shared
                .pool
                .run("an inspection", async |c| c.query_typed(&self.sql.inspect, &[(&prefix, Type::TEXT)]).await)
                .await?;
            let mut infos: Vec<LockInfo> = rows
                .iter()
                .filter(|row| crate::glob::matches(pattern, row.get::<_, &str>(0)))
                .map(|row| {
                    let (name, fence, token, left_ms): (String, i64, String, i64) =
                        (row.get(0), row.get(1), row.get(2), row.get(3));
                    let held = left_ms > 0;
                    let ttl = held.then(|| Duration::from_millis(left_ms as u64));
                    LockInfo {
                        name,
                        held,
                        ttl,
                        fence: Some(Fence::new(fence as u64)),
                        kind: if held { LockKind::Plain } else { LockKind::Idle },
                        holders: if held {
                            vec![Holder { role: HolderRole::Lock, id: short_id(&token), ttl }]
                        } else {
                            Vec::new()
                        },
                        owner: None,
                        permits: None,
                        queue: Vec::new(),
                        writer_waiting: None,
                        delay: None,
                    }
                })
                .collect();
            infos.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(infos)
        })
    }

    fn wake(&self) -> &WakeHub {
        &self.shared.wake
    }

    fn leader<'a>(&'a self, keys: &'a LockKeys) -> BoxFuture<'a, Result<Option<Leader>>> {
        Box::pin(async move {
            let name = &keys.name;
            let rows = self
                .shared
                .pool
                .run("a leader read", async |c| c.query_typed(&self.sql.leader, &[(name, Type::TEXT)]).await)
                .await?;
            Ok(rows.first().map(|row| Leader::new(row.get(0), Fence::new(row.get::<_, i64>(1) as u64))))
        })
    }
}
