//! The Redis layer: one Redis, a Redis Cluster and Redlock, the Lua scripts they run, and the
//! mapping from holds to those scripts. Nothing outside this module names a script.
//!
//! | file | what lives there |
//! |---|---|
//! | `single`, `cluster`, `redlock` | the three Redis backends |
//! | `connections` | long-lived multiplexed connections from a deadpool pool (one Redis, each Redlock node) |
//! | `eviction` | the `maxmemory-policy` check at connect |
//! | `scripts` | the plain lock's scripts, and [`Call`]: one script invocation that any Redis backend runs or pipelines |
//! | `first_attempt` | the plain lock's first attempt on one Redis: a pipeline of plain commands, no script |
//! | `holds` | which scripts keep each hold: attempt, extension, release, leave |
//! | `reentrant`, `fair`, `read_write`, `semaphore`, `members` | the primitives' own scripts |
//! | `leader` | a leader's lock and the value beside it, and the followers' read |
//! | `retire` | the fence retirement script |
//! | `view` | one server's read-only view of a lock, for `inspect` |
//!
//! # What a plain pair costs Redis
//!
//! One uncontended acquire and release of the plain lock on one Redis (`MONITOR`) is two round
//! trips: the pipeline `SET NX PX`, `INCR` (fence); then `EVALSHA` of the release, which runs
//! `GET`, `DEL` and `EXISTS` (waiter mark), and `PUBLISH` only when a waiter announced itself.
//! rslock's pair is `SET NX PX`, then `EVALSHA` running `GET` and `DEL`. (Until December 2026 the
//! pipeline also read the lock-delay key with `EXISTS`; a lock-delay now keeps the lock key
//! itself: see `first_attempt`.)
//!
//! Measured on 2026-12-05 on the project's `redis-server` 7.0.15 (2 shared cores): `CONFIG
//! RESETSTAT`, then `lockctl --connections 1 bench --concurrency 16 --duration-ms 5000` (or
//! rslock's harness, `loadtest/peers`), then `INFO commandstats` (µs per call, inside Redis):
//!
//! | command | lockkit | rslock |
//! |---|---|---|
//! | `EVALSHA` (release; includes the commands it runs) | 4.7 | 3.5 |
//! | `SET NX PX` | 0.9 | 0.9 |
//! | `INCR` (fence) | 0.3 | |
//! | sum per pair | 5.9 | 4.4 |
//!
//! (Earlier that day, with the `EXISTS`, the same run gave lockkit 3.6, 0.7, 0.2 and 0.1 µs for
//! the `EXISTS`, and rslock 3.0 and 0.8: the box's speed moves these figures by a third from one
//! hour to the next, so compare the two columns of one run.)
//!
//! Before the pipeline the first attempt was a `MULTI` transaction (`EXEC` 1.3 µs with its three commands,
//! `MULTI` 0.06, on 2026-12-02); the pipeline costs Redis about the same and the client about
//! 15% less per pair (callgrind, `lockctl bench` at 16 tasks: 41.8k instructions per pair against
//! 49.3k), because it encodes two commands and decodes five replies fewer.
//! Sizing the pipeline's commands once and writing side keys without `write!` took it to 35.4k
//! (rslock's harness at 16 tasks, measured the same way that day: 34.2k).
//!
//! Before the transaction, the acquire was a script: 4.9 µs per call. Redis' own CPU per pair
//! (utime+stime of `redis-server` over the run, `/proc`) is twice to three times the sum above:
//! reading and parsing the commands, replying, and the system calls, which batching across
//! concurrent tasks on one connection shares out. That is why a second connection cost about a
//! third more Redis CPU per pair (see `LockClientBuilder::connections`).

mod arg;
pub(crate) mod cluster;
mod compare_delete;
mod connections;
mod eviction;
mod fair;
mod first_attempt;
pub(crate) mod holds;
pub(crate) mod leader;
mod members;
pub(crate) mod read_write;
pub(crate) mod redlock;
mod reentrant;
pub(crate) mod retire;
pub(crate) mod scripts;
mod semaphore;
pub(crate) mod sentinel;
pub(crate) mod single;
mod view;

use std::sync::Arc;

use ::redis::aio::ConnectionLike;

use self::scripts::Call;
use super::BoxFuture;
use crate::{
    jobs::Jobs,
    model::{error::Result, hold::Hold},
};

/// What only the Redis backends that keep every primitive (one Redis, a cluster) can do: run one
/// of a primitive's own scripts (a queue exit, a downgrade, a fence retirement) on the server of
/// its one hash tag. Offered through [`Backend::redis_scripts`](super::Backend::redis_scripts).
pub(crate) trait RedisScripts: Send + Sync {
    /// Runs `call` on the server of its keys' hash tag.
    fn run<'a>(&'a self, call: &'a Call<'_>) -> BoxFuture<'a, Result<::redis::Value>>;
}

/// Takes a fair waiter that gave up out of its queue (nothing for the other holds).
pub(crate) fn leave<'a>(scripts: &'a dyn RedisScripts, hold: &'a Hold) -> BoxFuture<'a, Result<()>> {
    Box::pin(async move {
        if let Some(call) = holds::leave(hold) {
            scripts.run(&call).await?;
        }
        Ok(())
    })
}

/// The connection an acquire runs on, armed to undo the grant if the acquire is dropped before
/// its reply was read: an owner-checked release of `token`'s grant of `hold`, sent on the same
/// connection, so that it follows the acquire. It owns the connection and lends it to the
/// attempt ([`conn`](Self::conn)), and builds the release (a handle on the connection, the hold,
/// a copy of the token) only if it must run: nearly every acquire is answered and disarms it.
/// (A clone of the connection made for the undo on every acquire, and dropped again, moves
/// shared counters between the cores; without it `lockctl bench` at 16 tasks made 1.2 and 2.6%
/// more pairs/s in two alternating rounds against the same Redis, December 2026.)
pub(crate) struct UndoOnDrop<'a, C: ConnectionLike + Send + 'static> {
    jobs: &'a Jobs,
    hold: &'a Arc<Hold>,
    token: &'a str,
    /// `None` once disarmed; taken by the undo when it must run.
    conn: Option<C>,
}

impl<'a, C: ConnectionLike + Send + 'static> UndoOnDrop<'a, C> {
    /// Arms the undo of `token`'s grant of `hold` on `conn`.
    pub(crate) fn arm(jobs: &'a Jobs, conn: C, hold: &'a Arc<Hold>, token: &'a str) -> Self {
        Self { jobs, hold, token, conn: Some(conn) }
    }

    /// The connection, for the attempt.
    pub(crate) fn conn(&mut self) -> &mut C {
        self.conn.as_mut().expect("the attempt runs before the undo is disarmed")
    }

    /// The reply was read: nothing to undo.
    pub(crate) fn disarm(&mut self) {
        self.conn = None;
    }
}

impl<C: ConnectionLike + Send + 'static> Drop for UndoOnDrop<'_, C> {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        let (hold, token) = (self.hold.clone(), self.token.to_owned());
        self.jobs.background(async move {
            if let Err(e) = scripts::owner_checked(&mut conn, &holds::release(&hold, &token)).await {
                tracing::warn!(lock = %hold.keys.name, error = %e, "could not undo an abandoned acquire; it will expire");
            }
        });
    }
}
