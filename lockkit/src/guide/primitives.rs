//! # Primitives
//!
//! Every primitive ends in the same [`LockGuard`](crate::LockGuard) (fence, loss signal,
//! watchdog, owner-checked and cancel-safe release); the multi-lock in a
//! [`MultiGuard`](crate::MultiGuard) of them. All keys of a primitive share the hash tag
//! `{prefix:NAME}`, so each works on Redis Cluster. A name belongs to one primitive at a time (the
//! plain lock, a reentrant holder, a writer and a fair holder all occupy `{prefix:NAME}` and so
//! exclude each other).
//!
//! | primitive | one Redis, Cluster | Redlock | ZooKeeper, etcd, PostgreSQL |
//! |---|---|---|---|
//! | plain lock, multi-lock | yes | yes | yes |
//! | lock-delay | yes | yes (on each node) | no |
//! | reentrant, fair, read-write, semaphore | yes | no | no |
//!
//! A backend that does not keep one refuses it with
//! [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) ("not supported on redlock"): counts,
//! queues and permits cannot be agreed by a vote of independent masters, and the consensus and SQL
//! backends keep only their natural lock.
//!
//! ```rust,no_run
//! use std::time::Duration;
//!
//! # async fn example(client: lockkit::LockClient) -> lockkit::Result<()> {
//! let wait = Duration::from_secs(2);
//!
//! // Lock-delay: if this holder dies, nobody gets the lock until 5 s after its lease ended.
//! let guard = client.acquire("ledger").lock_delay(Duration::from_secs(5)).wait(wait).await?;
//! guard.release().await?; // a release: no delay
//!
//! // Reentrant: the same owner id enters again, with the same fence.
//! let outer = client.reentrant("account:7", "worker-1").wait(wait).await?;
//! let inner = client.reentrant("account:7", "worker-1").await?;
//! assert_eq!(inner.fence(), outer.fence());
//! inner.release().await?;
//! outer.release().await?;
//!
//! // Fair: first come, first served; a waiter that died loses its place after 3 s.
//! let turn = client.fair("printer").queue_timeout(Duration::from_secs(3)).wait(wait).await?;
//! turn.release().await?;
//!
//! // Read-write, with a downgrade from writer to reader.
//! let writer = client.read_write("catalog").write().wait(wait).await?;
//! let reader = writer.downgrade().await?;
//! reader.release().await?;
//!
//! // Semaphore: at most 4 permits, each with its own fence.
//! let permit = client.semaphore("exports", 4).wait(wait).await?;
//! permit.release().await?;
//!
//! // Multi-lock: all or nothing, in canonical order.
//! let both = client.multi(&["account:7", "account:3"]).wait(wait).await?;
//! println!("{:?}", both.fences());
//! both.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Contended hand-over, plain against fair (`lockctl bench --concurrency 16 --locks 1
//! --duration-ms 5000 --fair`, one run, one Redis on a 2-core box): the plain lock's wait p99
//! was 25.6 ms (max 57 ms), the fair lock's 9.2 ms (max 18 ms); the plain lock moved more pairs per
//! second (5059 against 3293) because its releaser often re-takes the lock itself, which also makes
//! its release-to-next-grant gap small (p99 0.27 ms against the fair lock's 0.49 ms, a real hand-over
//! to another waiter: one publish and one round trip).
