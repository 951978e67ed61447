//! # ZooKeeper (`zk://`, feature `zookeeper`)
//!
//! `zk://[user:password@]host:port[,host:port...][/chroot]`, for example
//! `zk://127.0.0.1:2181/locks`. With credentials: digest auth, and lock nodes only their creator
//! may touch (`creator_all`); without: `anyone_all`, any client may delete a lock node.
//!
//! ## Layout and interop
//!
//! Apache Curator's `InterProcessMutex` layout: lock `NAME` is the node `<chroot>/NAME`, each
//! waiter an ephemeral sequential child `_c_<guid>-lock-<seq>`, the lowest holds it, each waiter
//! watches only its predecessor. Curator and kazoo's `Lock` (with
//! `extra_lock_patterns=["-lock-"]`) exclude each other with us.
//!
//! ## What it guarantees
//!
//! Exclusion while a quorum of the ensemble is up. A lease lives as long as the client's session,
//! so it is at most the negotiated session timeout (ZooKeeper keeps it within 2 to 20
//! `tickTime`s). Curator's rule: a suspended connection means you cannot be sure you hold the
//! lock, so [`LockGuard::lost`](crate::LockGuard::lost) fires when the connection is not back
//! before the lease ends, and at the next renewal once the session expired or the node is gone. A
//! renewal syncs with the leader before it reads the node, so a follower cut off from its leader
//! cannot vouch for a session the leader already expired.
//!
//! Fences are the node's `czxid`: strictly increasing, across restarts too, but not dense, and
//! they cannot be raised
//! ([`LockClient::ensure_fence_at_least`](crate::LockClient::ensure_fence_at_least) fails with
//! [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) past the current zxid).
//!
//! Only the plain lock and the multi-lock (no lock-delay); the rest is refused with
//! [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported). Pick it when you run ZooKeeper
//! already, or need fences that survive a server restart without re-seeding. Each acquire and
//! release is a quorum write synced to disk: suited to locks held for seconds, not milliseconds.
