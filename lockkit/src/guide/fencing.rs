//! # Fencing: what makes a lease lock safe
//!
//! A lease lock alone cannot guarantee mutual exclusion: a holder can pause (GC, swap, `SIGSTOP`)
//! past its lease, a write it sent before the loss can land after it, and Redis can lose its data.
//! Every grant therefore carries a [`Fence`](crate::Fence), larger than that of every earlier
//! grant of the same lock, and the store that the lock protects refuses a write whose fence is
//! older than one it has seen. The lock makes contention cheap; the fence check makes it correct.
//!
//! [`LockGuard::run`](crate::LockGuard::run) stops work once the lease is lost, but it cannot
//! call back a write already on the wire: that write is refused by the store's check, or it was
//! never a problem. Pass the fence into every write, with or without `run`.
//!
//! ## Fencing a read-modify-write
//!
//! 1. The holder first **claims** the row with its fence: `UPDATE ... SET fence = $fence WHERE
//!    key = $key AND fence < $fence`.
//! 2. Then it reads.
//! 3. Then it writes only **`WHERE fence = $fence`**.
//!
//! A plain `fence <= $fence` on the final write is not enough: a stale holder could write between
//! the new holder's read and write. A rejected claim or write means the lease was lost: abort,
//! forget what was read, and acknowledge nothing more.
//!
//! Claim strictly (`<`) when each grant claims once: after Redis lost its data, the counter can
//! hand out a fence equal to one the store already saw, and the strict claim refuses it; re-seed
//! with [`LockClient::ensure_fence_at_least`](crate::LockClient::ensure_fence_at_least) from the
//! highest fence the store accepted, and retry. Claim and write in one transaction when you can:
//! one round trip, and the row lock keeps everyone else out in between.
//!
//! A single SQL transaction that reads and conditionally writes under the row lock is already
//! safe without any lock: the fence earns its keep where state lives outside the store's own
//! atomicity (a holder's memory, a cache, a file, a side effect).
//!
//! The example `fenced_update` (in the crate's `examples/`) runs this against a Redis key
//! compared in a script, with a holder paused past its lease whose late write is refused; on
//! PostgreSQL the lease table lets the check join the lock row itself
//! ([`postgres`](super::postgres)).
//!
//! ## Auditing late writes
//!
//! [`LockGuard::remaining`](crate::LockGuard::remaining) says how long the lease is known to last.
//! Recorded next to a write as a wall-clock time (`SystemTime::now() + remaining()`), it lets an
//! audit find the writes that landed after their own lease had run out: the ones a fence must
//! refuse.
