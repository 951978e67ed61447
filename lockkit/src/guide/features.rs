//! # Features in detail
//!
//! The README's feature table, cell by cell, with what each costs and where it stops.
//!
//! | feature | what you get |
//! |---|---|
//! | atomic acquire | `SET NX PX` with a random 128-bit owner token + `INCR` of the fence counter, in one round trip: on one Redis a first attempt is a pipeline of those plain commands, every other attempt a Lua script (Redlock: on every node at once, a majority must grant within the lease's validity) |
//! | fencing tokens | [`LockGuard::fence`](crate::LockGuard::fence), strictly increasing per lock; [`LockClient::ensure_fence_at_least`](crate::LockClient::ensure_fence_at_least) re-seeds after Redis data loss |
//! | watchdog | default lease 30 s renewed every 10 s, batched into one pipeline for all held locks (Redlock: one per node, a majority must confirm) |
//! | loss signal | [`LockGuard::lost`](crate::LockGuard::lost) (a future) and [`LockGuard::is_lost`](crate::LockGuard::is_lost), at the latest at the local deadline (lease minus a drift margin, on a clock that counts a suspend), which every check reads itself: a holder paused past its lease sees the loss on its next check; [`LockGuard::remaining`](crate::LockGuard::remaining) says how long the lease is known to last (record `now + remaining()` next to a write to audit writes that landed after their lease) |
//! | waiting without polling | waiters sleep on a pub/sub wake-up (one waiter per process per release, first come first served), capped by the holder's TTL; jittered polling only while wake-ups are down |
//! | safe release | owner-checked compare-and-delete; release waits out an in-flight renewal, none runs after |
//! | cancel safety | dropping a guard, or a `release()` future before it completed, releases in the background; dropping an acquire future after the grant releases too; a grant answered after its own lease is undone, never handed out (`lockkit_late_grants_total`) |
//! | interop | the lock key is exactly `{lockkit:NAME}` holding the token: redis-py `Lock`, redsync, node-redlock on the same key exclude each other with us |
//! | cluster-ready keys | every key of a lock shares the hash tag `{prefix:NAME}` |
//! | lean on the wire | 2 long-lived multiplexed connections by default: concurrent operations pipeline, no per-operation pool checkout |
//! | observability | `metrics` facade (`lockkit_*`) and `tracing` spans; no exporter forced on you |
//! | `tls` feature | `rediss://` URLs (native TLS) |
//! | lock-delay | [`Acquire::lock_delay`](crate::Acquire::lock_delay): a lease that ends without a release (crash, hang) keeps the lock unavailable for the delay, timed by Redis (the lock key expires the delay after the lease, and `{prefix:NAME}:delay` records where the lease ends), so a stale holder's in-flight writes drain first, and other libraries' `SET NX` on the same key waits too; a release has no delay. One Redis, Redis Cluster and Redlock (on each node); ZooKeeper, etcd and PostgreSQL refuse it with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) |
//! | reentrant lock | [`LockClient::reentrant`](crate::LockClient::reentrant)`(name, owner)`: an explicit owner id re-enters; each grant is its own lease (random token, renewed by the watchdog) sharing the first grant's fence; free when the owner's count of live grants reaches zero. A grant whose task died drops out at its own expiry |
//! | fair lock | [`LockClient::fair`](crate::LockClient::fair): FIFO by server arrival; only the head takes a free lock (no barging, not even by the releaser); a release wakes the head alone on its own channel. Waiter deadlines are server time (`TIME`): a waiter that died loses its place [`Acquire::queue_timeout`](crate::Acquire::queue_timeout) after its last attempt (10 s default) and the others retry at that moment; a waiter that gives up leaves at once; the queue keys vanish with the last waiter |
//! | read-write lock | [`LockClient::read_write`](crate::LockClient::read_write) → [`ReadWriteLock::read`](crate::ReadWriteLock::read) / [`ReadWriteLock::write`](crate::ReadWriteLock::write): many readers or one writer, both renewed by the watchdog; writer preference on by default ([`ReadWriteLock::prefer_writers`](crate::ReadWriteLock::prefer_writers)); [`LockGuard::downgrade`](crate::LockGuard::downgrade) turns a write grant into a read share atomically. The fence rises on each write grant; a read grant carries the latest write fence |
//! | semaphore | [`LockClient::semaphore`](crate::LockClient::semaphore)`(name, permits)`: each permit a lease with its own fence; a dead client's permits come back when their lease ends, timed by Redis (permits are sorted-set members scored by their server-time expiry) |
//! | multi-lock | [`LockClient::multi`](crate::LockClient::multi)`(&names)` → [`MultiGuard`](crate::MultiGuard): all-or-nothing in canonical (sorted) order, so overlapping sets never deadlock; a partial acquisition is undone; one fence per lock. Every backend |
//! | fence hygiene | [`LockClient::retire_fence`](crate::LockClient::retire_fence): deletes the fence counter of a name nothing uses, and returns the last fence (see [`redis`](super::redis)) |
//! | operator CLI | `lockctl`, a separate crate in lockkit's repository (`cargo build -p lockctl` there; not part of this package): acquire, inspect (one JSON line per lock: `name`, `held`, `ttl_ms`, `fence`, then `kind` — plain, reentrant, read-write, semaphore, fair, idle —, `holders` with the time left to each and a short hash of its token, never the token; the reentrant `owner`, `permits_out` of `permits`, the fair `queue` in order with each waiter's deadline, `writer_waiting_ms`, `delay_ms`; all timed by the server, one read-only script per name on its hash tag's node; on Redlock the majority view of the plain lock, primitives shown as `unsupported`; the same view in the library: [`LockClient::inspect`](crate::LockClient::inspect) → [`LockInfo`](crate::LockInfo)), fence, bench (`--fair`: plain and fair lock side by side in one run); `--url` (env `LOCKKIT_URL`) takes any backend's URL, and an acquire without a Redlock quorum exits 3 with `"reason":"no_quorum"` |
//! | `serde` feature | [`Fence`](crate::Fence) serializes as its number |
//! | work stopped on loss | [`LockGuard::run`](crate::LockGuard::run)`(work)` and [`LockClient::with_lock`](crate::LockClient::with_lock)`(name, wait, \|fence\| work)`: the work is polled only while the lease holds (checked against the local deadline before every poll), dropped at its next await once it is lost, with an error whose [`lease_loss`](crate::Error::lease_loss) says why; the lock is released when the work ends, whatever it returned. A write already sent may land after the loss: that is what the fence is for |
//!
//! ## Errors
//!
//! One [`Error`](crate::Error) type with predicates: [`Error::is_timeout`](crate::Error::is_timeout)
//! (still held after the wait), [`Error::is_lost`](crate::Error::is_lost) (with
//! [`Error::lease_loss`](crate::Error::lease_loss) when the lease's own loss signal stopped work),
//! [`Error::is_unavailable`](crate::Error::is_unavailable) (the message names the backend, or the
//! Redlock node, that did not answer), [`Error::is_no_quorum`](crate::Error::is_no_quorum)
//! (Redlock), [`Error::is_unsupported`](crate::Error::is_unsupported) (the backend cannot do this at
//! all: a primitive or lock-delay it does not keep, a fence it cannot raise; not retryable),
//! [`Error::is_retryable`](crate::Error::is_retryable).
