//! The plain lock's first attempt on one Redis, without a script: one pipeline of `SET NX PX`
//! (the owner token) and `INCR` (the fence), sent in one write and answered in one read.
//!
//! Why: a script costs Redis about 4 µs of its own per call (looking it up, entering Lua, one
//! fake client per `redis.call`), more than the commands it runs; plain commands cost a fraction
//! of that. Measured on Redis 7.0 (`INFO commandstats`, `lockctl bench` at 16 tasks, December
//! 2026): the acquire script took 4.9 µs per call, the commands about 1 µs together (see the
//! [module](super) docs for the whole pair). An earlier version wrapped them in `MULTI`/`EXEC`:
//! the transaction added two commands and five replies to decode (`+OK`, the `+QUEUED`s, the
//! `EXEC` array) and gave nothing the pipeline lacks, as follows.
//!
//! What it gives up, and why that is safe:
//! - the two commands are not atomic: another client's command may run between them. The fence
//!   still follows grant order. This grant's `INCR` runs before its answer comes back, so before
//!   its holder can release; the next grant's `SET` can only follow that release (or the end of
//!   this lease), and its `INCR` comes after its `SET`. So a later grant always takes a larger
//!   fence. The one exception is a lease that ran out between this `SET` and this `INCR`: then
//!   the answer came after the lease it granted, and the acquire refuses the grant as too late
//!   (`Schedule::is_expired`), whatever its fence.
//! - the `INCR` runs whether or not the `SET` granted, so a refused first attempt spends a fence:
//!   fences stay strictly increasing per name, with gaps, as on PostgreSQL and ZooKeeper.
//! - it reads no lock-delay key: someone's lock-delay keeps the lock key itself until the delay is
//!   over (a lock-delay grant's key expires its delay after its lease; see the scripts), so the
//!   `SET NX` is refused like any held lock. (Until December 2026 the delay lived in its own key
//!   only, and this pipeline carried an `EXISTS` of it: a third command and a third reply on every
//!   grant, for a lock-delay that few names ever set. Leaving it out gave lockkit 1.6 to 6.8% more
//!   pairs/s at 16 tasks in three alternating rounds against the same Redis.)
//! - it does not announce a waiter: it is the attempt before the caller listens for wake-ups,
//!   and a caller that waits tries again (with the script, which announces) once it listens.
//!
//! A plain lock with a lock-delay of its own, and every other primitive, keep their script.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::scripts::millis;
use crate::model::{
    hold::{Hold, HoldKind},
    keys::LockKeys,
};

/// What the pipeline came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstAttempt {
    /// Granted under this fence.
    Granted(u64),
    /// Someone holds the lock, or keeps it in their lock-delay (its lease left is not read: a first
    /// attempt that is refused is followed by a scripted one, which reads it, if the caller waits
    /// at all).
    Held,
}

/// Whether `hold`'s first attempt can go without a script: the plain lock without a lock-delay.
pub(crate) fn applies(hold: &Hold) -> bool {
    matches!(hold.kind, HoldKind::Lock { delay } if delay.is_zero())
}

/// Runs the pipeline for `token` with a lease of `lease`.
pub(crate) async fn attempt(
    conn: &mut impl ConnectionLike,
    keys: &LockKeys,
    token: &str,
    lease: Duration,
) -> redis::RedisResult<FirstAttempt> {
    let mut set = sized(&["SET", &keys.lock, token, "NX", "PX"], LEASE_DIGITS);
    set.arg(millis(lease));
    let mut pipe = redis::Pipeline::with_capacity(2);
    pipe.add_command(set).add_command(sized(&["INCR", &keys.fence], 0));
    let (set, fence): (Option<()>, u64) = pipe.query_async(conn).await?;
    Ok(match set {
        None => FirstAttempt::Held,
        Some(()) => FirstAttempt::Granted(fence),
    })
}

/// Room for the lease in milliseconds, in decimal (any `u64`).
const LEASE_DIGITS: usize = 20;

/// A command of `words`, with room for one more argument of `then` bytes, its buffers sized once:
/// grown argument by argument, they were reallocated several times per command.
fn sized(words: &[&str], then: usize) -> redis::Cmd {
    let bytes = words.iter().map(|w| w.len()).sum::<usize>() + then;
    let mut cmd = redis::Cmd::with_capacity(words.len() + 1, bytes);
    for word in words {
        cmd.arg(*word);
    }
    cmd
}
