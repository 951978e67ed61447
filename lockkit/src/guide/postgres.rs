//! # PostgreSQL (`postgres://` and `postgres+advisory://`, feature `postgres`)
//!
//! Two backends on one server, with the same fences:
//!
//! | | lease table | advisory locks |
//! |---|---|---|
//! | URL | `postgres://[user:password@]host:port/db` | `postgres+advisory://[user:password@]host:port/db` |
//! | a held lock is | a row in `lockkit_locks`, timed by the server's clock (`clock_timestamp()`) | `pg_try_advisory_lock(hashtextextended('lockkit:NAME', 0))` on a session pinned for the lock's life |
//! | a lease ends when | its `expires_at` passes unrenewed, on the server's clock | the session ends (`lost()` fires at the next renewal), or no renewal is answered before the local deadline |
//! | costs | one write per renewal (batched per client) | no table, no writes; **one connection per held lock** |
//! | PgBouncer transaction pooling | works: `LISTEN` hears nothing there, which a self-`NOTIFY` at connect finds out, and waiters then poll at most every 500 ms | does not work |
//!
//! URLs are tokio-postgres' (no TLS yet: `sslmode=require` fails), for example
//! `postgres://app@127.0.0.1:5432/app`.
//!
//! ## What they guarantee
//!
//! Fences come from the durable sequence `lockkit_fence`: strictly increasing across holders and
//! server restarts (with gaps). Both keep only the plain lock and the multi-lock (no lock-delay);
//! the rest is refused with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported). Pick them
//! when your data already lives in PostgreSQL: the fence check can join the lock row in your own
//! transaction (below). psql takes the same advisory lock with
//! `SELECT pg_advisory_lock(hashtextextended('lockkit:NAME', 0))`.
//!
//! ## The lock and the fence check in one transaction
//!
//! With `postgres://`, a service whose data lives in the same database checks its fence inside its
//! own transaction, against the lock row itself, timed by the server's clock:
//!
//! ```sql
//! -- $1 = the lock name, $2 = guard.fence().as_i64()
//! UPDATE stock SET units = units - 1
//! WHERE sku = 'sku-1'
//!   AND EXISTS (SELECT 1 FROM lockkit_locks
//!               WHERE name = $1 AND fence = $2 AND expires_at > clock_timestamp());
//! -- 0 rows: the lease ended or a newer holder took over; stop and acknowledge nothing.
//! ```
//!
//! Add `FOR SHARE` to a `SELECT ... FROM lockkit_locks WHERE name = $1 AND fence = $2` at the start of
//! a longer transaction to keep the row (so a new holder's takeover waits for your commit). Another
//! program takes the same lock with the statement lockkit runs (a refused attempt uses up a sequence
//! value):
//!
//! ```sql
//! INSERT INTO lockkit_locks AS l (name, token, fence, expires_at)
//! VALUES ($1, $2, nextval('lockkit_fence'), clock_timestamp() + interval '30 seconds')
//! ON CONFLICT (name) DO UPDATE SET token = excluded.token, fence = nextval('lockkit_fence'),
//!                                  expires_at = excluded.expires_at
//! WHERE l.expires_at <= clock_timestamp()
//! RETURNING fence;                                     -- no row: held by someone else
//! UPDATE lockkit_locks SET token = '', expires_at = clock_timestamp()
//! WHERE name = $1 AND token = $2;                      -- release (then NOTIFY lockkit_released, $1)
//! ```
//!
//! Release frees the row rather than deleting it, and a takeover draws `nextval` in the `UPDATE`:
//! only then does it hold the row's lock, so fences follow the order of the grants. (The `VALUES`
//! of an `INSERT` are computed before the conflict is found; a fence drawn there can be older than
//! one granted while the statement waited. Found by the test that checks fences rise holder after
//! holder under contention.)
//!
//! The table and sequence are created if missing when a client connects (named after the client's
//! prefix, which must be a lowercase SQL identifier on PostgreSQL); raising a fence
//! ([`LockClient::ensure_fence_at_least`](crate::LockClient::ensure_fence_at_least)) needs the role to own the sequence.
