//! PostgreSQL: two locks on one server, chosen by the URL. Both keep only the plain lock (every
//! primitive is refused with a config error), take their fences from one sequence, and wake
//! waiters with `LISTEN`/`NOTIFY` instead of polling.
//!
//! # `postgres://`: a lease table ([`lease`])
//!
//! The database lock of the articles, done right. One row per held name, timed by the
//! **server's** clock (`clock_timestamp()`, not `now()`, which is the start of the transaction):
//!
//! ```sql
//! CREATE TABLE lockkit_locks (name text PRIMARY KEY, token text NOT NULL,
//!                             fence bigint NOT NULL, expires_at timestamptz NOT NULL,
//!                             value text);  -- a leader's value (election), NULL for a lock
//! CREATE SEQUENCE lockkit_fence;
//! ```
//!
//! (created `IF NOT EXISTS` when a client connects; `lockkit` is the client's prefix, which must
//! be a lowercase SQL identifier here). An acquire is one statement: an `INSERT ... ON CONFLICT
//! DO UPDATE ... WHERE expires_at <= clock_timestamp() RETURNING fence` that takes a free or
//! expired row, and, in the same round trip, the holder's remaining time when it did not. A
//! renewal is an owner-checked `UPDATE` of every lease of the client in one statement (`unnest`
//! of arrays); a release an owner-checked `UPDATE` that frees the row (token `''`, expired now; the
//! row stays, so that later grants draw their fence under its lock) plus `pg_notify`, in one
//! statement.
//!
//! Fits when: the connection may blip (the lease outlives it), the client goes through PgBouncer
//! in transaction pooling mode (every operation is one autocommit statement; waiters poll there,
//! as no notification gets through), and a write per renewal (every third of the lease, batched
//! per client) is affordable.
//!
//! # `postgres+advisory://`: session advisory locks ([`advisory`])
//!
//! `pg_try_advisory_lock(hashtextextended('<prefix>:<name>', 0))` on a session that the lock then
//! pins for its whole life: **one connection per held lock**. No table and no writes (only the
//! fence sequence), and the server releases the lock the moment the session ends, whatever the
//! client's state. A psql user takes the same lock with
//! `SELECT pg_advisory_lock(hashtextextended('lockkit:orders', 0));`. A leader election's
//! leader (`election`) also records itself in `lockkit_leaders (name, pid, fence, value)`, which
//! followers believe only while that pid still holds the lock under that fence. Does not work through
//! transaction pooling (the lock belongs to a session that the pooler hands to others).
//!
//! # Fences
//!
//! Every grant takes `nextval('<prefix>_fence')` in the statement that grants it: one sequence for
//! all names, so fences are strictly increasing per name (and across names), with gaps (a refused
//! lease acquire burns a value too). A sequence is durable and never goes back, so the fences
//! survive a server restart. [`raise_fence`](super::Backend::raise_fence) moves the sequence up
//! (`setval`, serialised against concurrent grants by `ALTER SEQUENCE`'s lock; it needs the role
//! to own the sequence), never down. All this needs the sequence's default `CACHE 1`: a client
//! refuses to connect to a sequence created (or altered) with a larger cache, whose sessions
//! would each draw from a block of their own, out of order.
//!
//! # Failure rule (what makes `lost()` fire)
//!
//! - Lease table: the watchdog's owner-checked `UPDATE` matched no row (the lease expired on the
//!   server's clock and someone took it, or the row was deleted): lost at once. No answer (server
//!   down, frozen, unreachable) until the local deadline: lost then; the row expires on the server
//!   at about the same time, so the next holder never overlaps a holder that still believes.
//! - Advisory: the renewal is one round trip on the pinned session asking whether it still holds
//!   the lock. A closed session (killed backend, server restart, `pg_terminate_backend`) is lost at
//!   once: the server released the lock when the session ended. No answer until the local
//!   deadline: lost then, and the client closes the session at the lease's end, which releases
//!   the lock on a live server.
//!
//! # Waiting
//!
//! One dedicated connection per client runs `LISTEN <prefix>_released`; a release sends
//! `pg_notify('<prefix>_released', name)` in its own transaction, which wakes this process's
//! waiters of that name. Expiry and a dead advisory session notify nobody: waiters sleep at most
//! the holder's remaining lease (lease table) or the client's wake safety interval (advisory).
//! While the listening connection is down (or does not answer its periodic ping), waiters poll.
//! They also poll when a `NOTIFY` sent from another session does not come back on it, as behind
//! a PgBouncer in transaction pooling mode, where `LISTEN` succeeds but hears nothing ([`listen`]
//! checks this at every (re)connection and logs a warning).
//!
//! # Connections and TLS
//!
//! `connections` command connections (round robin, each replaced after an error or a timeout),
//! one listening connection, and for advisory locks one session per held lock (sessions of
//! refused attempts are kept for reuse, up to `connections` of them). Every statement is bounded
//! by the command timeout. The URL is tokio-postgres' (`postgres://user:password@host:port/db`,
//! passwords work); TLS is not built: `sslmode=require` fails to connect, `prefer` (the default)
//! connects without it.

mod advisory;
mod lease;
mod listen;

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::sync::watch;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::{
    backend::{Backend, PgMode},
    model::{
        controls::Unprotected,
        error::{Error, ErrorKind, Result},
        fence::Fence,
        keys::LockKeys,
        settings::Config,
    },
    wake::WakeHub,
};

/// Longest a PostgreSQL prefix may be: `<prefix>_released` must fit in an identifier (63 bytes).
const MAX_PREFIX_LEN: usize = 54;

/// Opens the backend: connects, creates the table and the sequence if missing, and starts the
/// listening connection.
pub(crate) async fn open(url: &str, mode: PgMode, config: &Config, connections: usize) -> Result<Arc<dyn Backend>> {
    let names = Names::new(&config.prefix)?;
    // tokio-postgres' parse errors may quote the URL: never pass them on.
    let mut pg: tokio_postgres::Config = url.parse().map_err(|_| {
        Error::new(ErrorKind::Config, "invalid postgres URL (expected postgres://user:password@host:port/db?options)")
    })?;
    if pg.get_application_name().is_none() {
        pg.application_name("lockkit");
    }
    let server = Server { config: pg, timeout: config.command_timeout };
    let pool = Arc::new(Pool::new(server.clone(), connections));
    let schema = names.schema(mode);
    pool.run("the schema creation", async |client| client.batch_execute(&schema).await).await?;
    check_sequence(&pool, &names).await?;
    let wake = WakeHub::local(config.command_timeout);
    let stop = CancellationToken::new();
    let (settled, mut first_verdict) = watch::channel(false);
    tokio::spawn(
        listen::Listener {
            server: server.clone(),
            names: names.clone(),
            wake: wake.clone(),
            pool: pool.clone(),
            check: config.controls.keeps(Unprotected::PostgresListenUnchecked),
            settled,
            stop: stop.clone(),
        }
        .run(),
    );
    // Waiters of a client that just connected then rely on wake-ups only if they were seen to
    // work. Past the bound they poll until the listener settles.
    let _ = tokio::time::timeout(config.command_timeout, first_verdict.wait_for(|settled| *settled)).await;
    let shared = Shared { names, pool, wake, timeout: config.command_timeout, _listener: stop.drop_guard() };
    Ok(match mode {
        PgMode::Lease => Arc::new(lease::PgLease::new(shared)),
        PgMode::Advisory => Arc::new(advisory::PgAdvisory::new(shared, server, connections)),
    })
}

/// What both locks share: the SQL names, the command connections and the wake-up hub.
struct Shared {
    names: Names,
    pool: Arc<Pool>,
    /// Fed by the listening connection's notifications.
    wake: WakeHub,
    timeout: Duration,
    /// Stops the listening task when the backend is dropped.
    _listener: DropGuard,
}

/// The SQL names derived from the client's prefix (validated, so they are safe to splice).
#[derive(Debug, Clone)]
struct Names {
    prefix: String,
    /// `<prefix>_locks`: the lease table.
    table: String,
    /// `<prefix>_fence`: the fence sequence of both locks.
    sequence: String,
    /// `<prefix>_released`: the `NOTIFY` channel of releases; the payload is the lock name.
    channel: String,
    /// `<prefix>_leaders`: advisory locks' leaders (election): the holding session's pid, its
    /// fence and its value.
    leaders: String,
}

impl Names {
    fn new(prefix: &str) -> Result<Self> {
        let valid = !prefix.is_empty()
            && prefix.len() <= MAX_PREFIX_LEN
            && prefix.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && prefix.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "prefix {prefix:?} must be a lowercase SQL identifier on PostgreSQL (a-z, 0-9, _, not starting \
                     with a digit, at most {MAX_PREFIX_LEN} bytes): it names the table, sequence and channel"
                ),
            ));
        }
        Ok(Self {
            prefix: prefix.to_owned(),
            table: format!("{prefix}_locks"),
            sequence: format!("{prefix}_fence"),
            channel: format!("{prefix}_released"),
            leaders: format!("{prefix}_leaders"),
        })
    }

    /// The objects a mode needs, created once (one implicit transaction; the transaction-scoped
    /// advisory lock keeps concurrent clients from racing on the catalog).
    fn schema(&self, mode: PgMode) -> String {
        let Self { table, sequence, .. } = self;
        let table = match mode {
            // `value`: a leader's (election), NULL for a lock; added to tables made before it.
            PgMode::Lease => format!(
                "CREATE TABLE IF NOT EXISTS {table} (name text PRIMARY KEY, token text NOT NULL, \
                 fence bigint NOT NULL, expires_at timestamptz NOT NULL); \
                 ALTER TABLE {table} ADD COLUMN IF NOT EXISTS value text;"
            ),
            PgMode::Advisory => format!(
                "CREATE TABLE IF NOT EXISTS {leaders} (name text PRIMARY KEY, pid integer NOT NULL, \
                 fence bigint NOT NULL, value text NOT NULL);",
                leaders = self.leaders
            ),
        };
        format!(
            "SELECT pg_advisory_xact_lock(hashtextextended('lockkit schema {sequence}', 0)); \
             CREATE SEQUENCE IF NOT EXISTS {sequence}; {table}"
        )
    }

    /// A payload of the listening connection's check: no lock name (names cannot hold `{`), and
    /// its own, so that another client's check does not pass this one.
    fn check_payload(&self) -> String {
        format!("{{lockkit listen check {:016x}}}", rand::random::<u64>())
    }

    /// Sends the check's `payload` (made by [`check_payload`](Self::check_payload): nothing to
    /// quote) on the release channel.
    fn notify_check(&self, payload: &str) -> String {
        format!("NOTIFY {}, '{payload}'", self.channel)
    }

    /// The wake-up channel of a lock name, as `Hold::wake_channel` names it for a plain lock.
    fn wake_channel(&self, name: &str) -> Option<String> {
        LockKeys::new(&self.prefix, name).ok().map(|keys| keys.released)
    }

    /// The text whose `hashtextextended(_, 0)` is the advisory key of `name`.
    fn advisory_key(&self, name: &str) -> String {
        format!("{}:{name}", self.prefix)
    }

    /// Raises the fence sequence to at least `$at_least` and returns its value (0 if never
    /// used). `ALTER SEQUENCE` takes a lock that `nextval` waits for, so no grant slips between
    /// the read and the `setval`; both statements are one implicit transaction.
    fn raise_fence(&self, at_least: i64) -> String {
        let sequence = &self.sequence;
        format!(
            "ALTER SEQUENCE {sequence} INCREMENT BY 1; \
             SELECT CASE WHEN {at_least} > cur THEN setval('{sequence}', {at_least}) ELSE cur END \
             FROM (SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS cur FROM {sequence}) s"
        )
    }

    /// The fence sequence's `CACHE` setting, found the way `nextval('<sequence>')` finds it.
    fn sequence_cache(&self) -> String {
        format!("SELECT seqcache FROM pg_sequence WHERE seqrelid = '{}'::regclass", self.sequence)
    }

    /// The current value of the fence sequence (0 if never used).
    fn current_fence(&self) -> String {
        format!("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {}", self.sequence)
    }
}

/// Refuses a fence sequence with `CACHE` above 1. `CREATE SEQUENCE IF NOT EXISTS` accepts an
/// existing sequence as it is, and a cached sequence hands each session a block of values of its
/// own (session A draws 1, 2, 3 ... from its block while session B draws 21, 22 ...), so a later
/// grant could carry a smaller fence than an earlier one and a store would refuse the new holder
/// or accept the old.
async fn check_sequence(pool: &Pool, names: &Names) -> Result<()> {
    let sql = names.sequence_cache();
    let cache: i64 = pool.run("reading the fence sequence", async |c| c.query_one(&sql, &[]).await?.try_get(0)).await?;
    if cache > 1 {
        let sequence = &names.sequence;
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "the fence sequence {sequence} has CACHE {cache}: each session would draw fences from its own \
                 block, so a later grant could get a smaller fence than an earlier one; fix it with \
                 ALTER SEQUENCE {sequence} CACHE 1"
            ),
        ));
    }
    Ok(())
}

/// One round trip on a pooled connection: the server answers (both modes).
async fn ping(shared: &Shared) -> Result<()> {
    shared.pool.run("a ping", async |c| c.simple_query("").await.map(drop)).await
}

/// Raises the fence sequence to at least `at_least` (see [`Names::raise_fence`]). A role that
/// may not alter the sequence (not its owner) still gets the current value if it is high enough.
async fn raise_fence(shared: &Shared, at_least: Fence) -> Result<Fence> {
    let target = i64::try_from(at_least.get())
        .map_err(|_| Error::new(ErrorKind::Config, "a fence above i64::MAX does not fit a PostgreSQL sequence"))?;
    let names = &shared.names;
    let first_value = |messages: Vec<SimpleQueryMessage>| -> Result<Fence> {
        messages
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(row) => row.get(0).and_then(|v| v.parse::<u64>().ok()),
                _ => None,
            })
            .map(Fence::new)
            .ok_or_else(|| Error::new(ErrorKind::Unavailable, "postgresql returned no fence value"))
    };
    let sql = names.raise_fence(target);
    match shared.pool.run("a fence raise", async |c| c.simple_query(&sql).await).await {
        Ok(messages) => first_value(messages),
        Err(refused) if refused.kind() == ErrorKind::Config => {
            let current = names.current_fence();
            let current =
                first_value(shared.pool.run("a fence read", async |c| c.simple_query(&current).await).await?)?;
            if current >= at_least {
                Ok(current)
            } else {
                // A privilege that retrying will not grant: a setup problem, not an outage.
                Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "cannot raise the fence sequence {} to {at_least} (it is at {current}): this role may not \
                         alter it; its owner can run SELECT setval('{}', {at_least})",
                        names.sequence, names.sequence
                    ),
                )
                .with_source(refused))
            }
        }
        Err(e) => Err(e),
    }
}

/// How to reach the server. Holds the password: never logged.
#[derive(Clone)]
struct Server {
    config: tokio_postgres::Config,
    /// The client's command timeout: bounds connecting and every statement.
    timeout: Duration,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

impl Server {
    /// A new session whose connection is driven by its own task (ending with the client).
    async fn client(&self) -> Result<Client> {
        let (client, connection) = self.connect().await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "lockkit postgres connection ended");
            }
        });
        Ok(client)
    }

    async fn connect(
        &self,
    ) -> Result<(Client, tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>)> {
        match tokio::time::timeout(self.timeout, self.config.connect(NoTls)).await {
            Ok(Ok(pair)) => Ok(pair),
            Ok(Err(e)) => Err(pg_error("a connection", e)),
            Err(_) => Err(unanswered("a connection", self.timeout)),
        }
    }
}

/// The command connections: a few sessions that every statement is spread over (tokio-postgres
/// pipelines concurrent statements on one), each replaced after an error or a timeout.
struct Pool {
    server: Server,
    /// One session per slot, connected lazily; the async mutex makes one caller connect while the
    /// others of that slot wait for it.
    slots: Vec<tokio::sync::Mutex<Option<Arc<Client>>>>,
    next: AtomicUsize,
}

/// A session checked out of the pool, and its slot (to replace it if it fails).
struct Lane {
    slot: usize,
    client: Arc<Client>,
}

impl Pool {
    fn new(server: Server, connections: usize) -> Self {
        let slots = (0..connections.max(1)).map(|_| tokio::sync::Mutex::new(None)).collect();
        Self { server, slots, next: AtomicUsize::new(0) }
    }

    /// The next session round robin, connecting it if needed (bounded by the command timeout).
    async fn checkout(&self) -> Result<Lane> {
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let mut session = self.slots[slot].lock().await;
        if let Some(client) = session.as_ref().filter(|c| !c.is_closed()) {
            return Ok(Lane { slot, client: client.clone() });
        }
        let client = Arc::new(self.server.client().await?);
        *session = Some(client.clone());
        Ok(Lane { slot, client })
    }

    /// Forgets the lane's session after a failure, so that the next checkout reconnects (a
    /// statement still running on it finishes: whoever holds the session keeps it alive).
    async fn report<T>(&self, lane: &Lane, outcome: &Result<T>) {
        if outcome.as_ref().is_err_and(Error::is_unavailable) {
            let mut session = self.slots[lane.slot].lock().await;
            if session.as_ref().is_some_and(|c| Arc::ptr_eq(c, &lane.client)) {
                *session = None;
            }
        }
    }

    /// Runs `op` on a session, bounded by the command timeout.
    async fn run<T>(
        &self,
        what: &str,
        op: impl AsyncFnOnce(&Client) -> std::result::Result<T, tokio_postgres::Error>,
    ) -> Result<T> {
        let lane = self.checkout().await?;
        let outcome = bounded(what, self.server.timeout, op(&lane.client)).await;
        self.report(&lane, &outcome).await;
        outcome
    }
}

/// `future` (a statement) bounded by `timeout`, its error mapped.
async fn bounded<T>(
    what: &str,
    timeout: Duration,
    future: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, future).await {
        Ok(outcome) => outcome.map_err(|e| pg_error(what, e)),
        Err(_) => Err(unanswered(what, timeout)),
    }
}

fn unanswered(what: &str, after: Duration) -> Error {
    Error::new(ErrorKind::Unavailable, format!("postgresql did not answer {what} within {after:?}"))
}

/// A PostgreSQL error as a lockkit error: connection trouble and the server's transient refusals
/// (SQLSTATE classes 08 connection, 40 rollback, 53 resources, 55 object state, 57 operator
/// intervention such as a shutdown, 58 system) are retryable; any other refusal is a setup
/// problem (missing privileges, a table of another shape), which retrying will not fix.
fn pg_error(what: &str, e: tokio_postgres::Error) -> Error {
    let transient = match e.as_db_error() {
        Some(db) => ["08", "40", "53", "55", "57", "58"].iter().any(|class| db.code().code().starts_with(class)),
        None => true,
    };
    if transient {
        Error::new(ErrorKind::Unavailable, format!("postgresql could not run {what}")).with_source(e)
    } else {
        Error::new(ErrorKind::Config, format!("postgresql refused {what} (check the lockkit objects and privileges)"))
            .with_source(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_must_be_sql_identifiers() {
        assert_eq!(Names::new("lockkit").unwrap().table, "lockkit_locks");
        assert_eq!(Names::new("app_2").unwrap().channel, "app_2_released");
        for bad in ["", "Lockkit", "2x", "a-b", "a;drop", "x\"", &"a".repeat(55)] {
            assert_eq!(Names::new(bad).unwrap_err().kind(), ErrorKind::Config, "{bad:?}");
        }
    }

    #[test]
    fn the_wake_channel_is_the_plain_locks() {
        let names = Names::new("lockkit").unwrap();
        assert_eq!(names.wake_channel("orders"), Some("{lockkit:orders}:released".to_owned()));
        assert_eq!(names.advisory_key("orders"), "lockkit:orders");
    }
}
