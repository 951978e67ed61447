//! # Redis Cluster (`redis+cluster://`)
//!
//! `redis+cluster://[user:password@]host:port,host:port,...`: seed nodes (credentials on the
//! first apply to all), or `rediss+cluster://` over TLS with the `tls` feature. For example
//! `redis+cluster://127.0.0.1:7001,127.0.0.1:7002`.
//!
//! ## What it guarantees
//!
//! The same as [one Redis](super::redis), per lock: every key of a lock shares the hash tag
//! `{prefix:NAME}`, so a lock's keys sit in one slot on one master and its scripts run there
//! atomically; different locks spread over the masters. A resharding changes nothing for a
//! holder: renewals and releases follow the slot (`MOVED`/`ASK`).
//!
//! A failover with asynchronous replication can lose a grant, and roll the fence counter of that
//! master back: a replica promoted before it saw the latest `INCR` hands out a fence again. Re-seed
//! with [`LockClient::ensure_fence_at_least`](crate::LockClient::ensure_fence_at_least) after a
//! failover, and let the store's fence check refuse what a stale fence writes
//! ([`fencing`](super::fencing)).
//!
//! A lease ends as on one Redis: its key's TTL passes unrenewed, or the key is deleted.
//!
//! Every primitive is kept ([`primitives`](super::primitives)); inspection and
//! [`LockClient::inspect`](crate::LockClient::inspect) patterns scan every master.
