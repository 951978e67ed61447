//! # One Redis (`redis://`)
//!
//! `redis://[user:password@]host:port[/db]`, or `rediss://` over TLS with the `tls` feature. On
//! every Redis URL, `?allow_eviction=true` skips the [eviction check](#eviction-redis-must-run-with-maxmemory-policy-noeviction).
//!
//! ```no_run
//! # async fn example() -> lockkit::Result<()> {
//! let client = lockkit::LockClient::connect("redis://127.0.0.1:6390").await?;
//! assert_eq!(client.backend(), lockkit::BackendKind::Redis);
//! # Ok(()) }
//! ```
//!
//! ## What it guarantees
//!
//! Exclusion and strictly increasing fences while that Redis keeps its data. An acquire's first
//! attempt is one pipeline (`SET NX PX` with a random 128-bit owner token, `INCR` of the lock's
//! fence counter); the attempts of a waiter are one Lua script that does the same and announces the
//! waiter. A lock-delay grant's key expires the delay after its lease, so a `SET NX` inside the
//! delay fails like any held lock (lockkit's and other libraries'). A refused first attempt spends
//! a fence, so fences have gaps. A release is an owner-checked compare-and-delete (a script, or
//! `DELIFEQ`/`DELEX` where the server has them). The ACL user needs `SET`, `INCR`, `EXISTS` and the
//! scripting commands. After a restart without persistence, or a failover to a replica that had not
//! seen the latest writes, both reset: a second holder may be granted while the first still works,
//! and the counter may hand out a fence the store already saw. Re-seed the counter with
//! [`LockClient::ensure_fence_at_least`](crate::LockClient::ensure_fence_at_least) from the highest
//! fence your store accepted, and rely on the store's fence check ([`fencing`](super::fencing)) for
//! the writes in between.
//!
//! A lease ends when its key's TTL passes without a renewal (the watchdog renews every third of
//! the lease), or when the key is deleted or overwritten; the holder hears it from
//! [`LockGuard::lost`](crate::LockGuard::lost) at the next renewal, or at the local deadline at
//! the latest. With a lock-delay the key's TTL is the lease plus the delay: the lease ends the
//! delay before the key does.
//!
//! Every primitive is kept ([`primitives`](super::primitives)).
//!
//! ```no_run
//! # async fn example(client: lockkit::LockClient, highest_in_store: u64) -> lockkit::Result<()> {
//! // After Redis lost its data: new grants must outrank every write already made.
//! client.ensure_fence_at_least("inventory:sku-42", lockkit::Fence::new(highest_in_store)).await?;
//! # Ok(()) }
//! ```
//!
//! ## Keys
//!
//! For lock `NAME` with prefix `lockkit`: `{lockkit:NAME}` (owner token, with the lease as TTL),
//! `{lockkit:NAME}:fence` (fence counter, never expires until retired), and pub/sub channel
//! `{lockkit:NAME}:released`. The primitives add, under the same hash tag: `:delay` (lock-delay),
//! `:grants` (reentrant; `{lockkit:NAME}` is then a hash of owner and fence), `:readers` and
//! `:writer-waiting` (read-write), `:permits` and `:limit` (semaphore; the limit of the latest
//! permit, for inspection), `:queue` and `:queue-deadlines` (fair; wake-up channels
//! `:wake:TICKET`). Each expires with the grants or waiters it holds.
//!
//! The lock key is exactly `{lockkit:NAME}` holding the token, so redis-py's `Lock`, redsync and
//! node-redlock on the same key exclude each other with us.
//!
//! ## Eviction: Redis must run with `maxmemory-policy noeviction`
//!
//! A fence counter `{prefix:NAME}:fence` never expires, and a held lock is a key with a TTL. Under
//! `maxmemory-policy allkeys-*` Redis may evict a fence counter under memory pressure, and the next
//! grant's fence starts again from 1; under `volatile-*` it may evict a held lock, which is then
//! free while its holder still believes it holds it. Only `noeviction` (Redis' default) keeps
//! both: a write that needs memory fails instead.
//!
//! So [`LockClientBuilder::connect`](crate::LockClientBuilder::connect) reads
//! `CONFIG GET maxmemory-policy` on the server (on a cluster, each master; on Redlock, each node
//! that answers) and refuses any other policy with an
//! [`ErrorKind::Config`](crate::ErrorKind::Config) error that says why. To connect anyway (a Redis
//! that never reaches its `maxmemory`, a test), opt out with
//! [`LockClientBuilder::allow_eviction`](crate::LockClientBuilder::allow_eviction)`(true)` or the
//! URL parameter `allow_eviction=true` (`redis://host:6379/0?allow_eviction=true`,
//! `redlock://a:6379,b:6379,c:6379?allow_eviction=true`). A server that refuses `CONFIG` (an ACL
//! without `+config`, a renamed command, as on many managed services) is not refused: lockkit logs
//! a warning and connects, and keeping it on `noeviction` is then up to you. The policy is read
//! once, at connect: a later `CONFIG SET`, or a Redlock node that was down at connect, is not seen.
//!
//! ## Retiring fence counters
//!
//! A fence counter outlives every lock of its name, or fences would go backwards, so lockkit never
//! deletes one on its own. For names that will not come back (per-order, per-job locks),
//! [`LockClient::retire_fence`](crate::LockClient::retire_fence) deletes the counter, only while
//! nothing holds or waits for the name, and returns the last fence. Before retiring a name, the
//! store must either refuse every further write fenced under it, or keep that last fence as the
//! highest it has seen for the name; if the name is ever used again, call
//! [`LockClient::ensure_fence_at_least`](crate::LockClient::ensure_fence_at_least)`(name, last)`
//! before its first acquire. Only on one Redis or a Redis Cluster (elsewhere
//! [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported)).
//!
//! ## Connections
//!
//! One long-lived multiplexed connection by default
//! ([`LockClientBuilder::connections`](crate::LockClientBuilder::connections)): concurrent
//! operations pipeline on it, with no per-operation pool checkout. Waiters sleep on a pub/sub
//! wake-up (one waiter per process per release, first come first served), capped by the holder's
//! TTL; they poll with jitter only while wake-ups are down.
