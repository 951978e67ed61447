//! # Redlock (`redlock://`)
//!
//! `redlock://[user:password@]host:port,...`: at least 3 independent masters, 5 usual;
//! credentials per node; `redlocks://` over TLS with the `tls` feature. For example
//! `redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379,10.0.0.4:6379,10.0.0.5:6379`.
//!
//! ```no_run
//! # async fn example() -> lockkit::Result<()> {
//! let client = lockkit::LockClient::connect("redlock://127.0.0.1:6401,127.0.0.1:6402,127.0.0.1:6403").await?;
//! assert_eq!(client.backend(), lockkit::BackendKind::Redlock { nodes: 3, quorum: 2 });
//! # Ok(()) }
//! ```
//!
//! ## What it guarantees
//!
//! Exclusion while a majority of nodes keep their data and clocks drift by less than 1% (the local
//! deadline is the lease minus 1% and 2 ms); any minority may be down. The acquire script runs on
//! every node at once, and a majority must grant within the lease's validity; the watchdog renews
//! on every node, and a majority must confirm.
//!
//! Fences increase across majorities: each grant writes the largest counter of its majority back
//! to every node that answered, so any later majority sees it. A node restarted empty is covered
//! while a majority still holds the latest state; more restarts than that can repeat a fence and
//! allow two holders, so keep restarted nodes out for one lease (or use `appendfsync always`). No
//! lock stops a paused holder: the store's fence check does ([`fencing`](super::fencing)).
//!
//! A lease ends when a majority no longer confirms a renewal before the local deadline.
//!
//! ## Failures
//!
//! An operation that cannot reach a majority fails with
//! [`Error::is_no_quorum`](crate::Error::is_no_quorum) (also retryable): nothing was decided and
//! every partial grant was undone. Each node's answer to an acquire or a renewal is awaited for at
//! most [`LockClientBuilder::node_timeout`](crate::LockClientBuilder::node_timeout) (100 ms, and
//! never more than a tenth of the lease); releases and fence raises, which race no lease, wait up
//! to the command timeout.
//!
//! Only the plain lock, its lock-delay (on each node) and the multi-lock run; the other primitives
//! fail with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported): counts, queues and permits
//! cannot be agreed by a vote of independent masters.
