//! Redis Sentinel: `redis+sentinel://[user:password@]host:port,host:port/master-name[/db]`, or
//! `rediss+sentinel://` for TLS to the master and the Sentinels.
//!
//! The client asks the Sentinels for the master, checks with `ROLE` that it is one, and runs
//! everything exactly as on [one Redis](super::redis): every primitive, the same keys and scripts.
//! It moves to the new master on a broken connection, on a write refused with `READONLY` (the old
//! master was demoted), and on the Sentinels' `+switch-master`; waiters' wake-ups move with it.
//!
//! The URL's userinfo is the master's credentials; the Sentinels' own AUTH, if they need one,
//! goes in the query parameters `sentinel_username` and `sentinel_password`.
//!
//! # What an asynchronous failover does to a held lock
//!
//! Redis replicates asynchronously, and Sentinel promotes a replica without waiting for it to
//! catch up. A grant that the old master acknowledged but did not pass on before the failover is
//! gone: on the new master the lock is free, and another client can acquire it while the first
//! still believes it holds it. The fence counter may be behind in the same way, so the new holder
//! could get a fence that was already handed out.
//!
//! What lockkit does about it:
//! - **Fences never go backwards.** Before its first grant of a name, a promoted master's fence
//!   counter is raised to a floor made of the failover's epoch , so every fence
//!   granted after the failover is larger than every fence granted before it. A store that keeps
//!   the highest fence it accepted (a claim `WHERE fence < $t` sets `fence = $t`, every write says
//!   `WHERE fence = $t`) then refuses the writes of the holder that the failover deposed, as soon
//!   as the new holder has claimed.
//! - **Exclusion after a failover is bounded by one lease.** The deposed holder's watchdog renews
//!   on the new master, where its lock is gone, and reports the lease lost ([`lost()`](crate::LockGuard::lost)); it never
//!   believes in its lease past the lease's own deadline anyway. So a lock whose grant or latest
//!   renewal the failover lost may be held twice for at most one lease (counted from that holder's
//!   last successful renewal). Locks whose grant reached the replica are not affected: the new
//!   master has them, and their holders go on renewing there.
//! - **Not done: exclusion through a failover.** Asynchronous replication cannot give it. Redis'
//!   `WAIT` and `min-replicas-to-write` narrow the window (a grant that a replica acknowledged
//!   survives that replica's promotion) but do not close it (the promoted replica may be another
//!   one), and cost a round trip to a replica per grant; lockkit does not issue them. The fence
//!   is what keeps a deposed holder's writes out.
//!
//! The eviction-policy check reads the master only.
