//! The long explanations that the README only summarises: one page per backend, and pages on
//! fencing, the primitives and the features in detail. Documentation only: nothing here is code.
//!
//! | page | what it explains |
//! |---|---|
//! | [`redis`] | one Redis: URL, guarantees, keys, the eviction check, re-seeding and retiring fences |
//! | [`sentinel`] | Redis Sentinel: following the master, what an asynchronous failover does to a held lock, fences floored above every earlier one |
//! | [`cluster`] | Redis Cluster: slots, resharding, failover |
//! | [`redlock`] | Redlock over independent masters: majorities, clocks, fences across majorities |
//! | [`zookeeper`] | ZooKeeper: Curator's lock layout, sessions as leases, zxids as fences |
//! | [`etcd`] | etcd v3: etcd's `concurrency.Mutex` layout, leases, revisions as fences |
//! | [`postgres`] | PostgreSQL: the lease table, advisory locks, the fence check in your own transaction |
//! | [`consul`] | Consul: not built, and how it would map |
//! | [`fencing`] | fencing a read-modify-write, step by step |
//! | [`primitives`] | reentrant, fair, read-write, semaphore, multi-lock and lock-delay |
//! | [`features`] | every feature of the README's table in detail |
//!
//! # Which backend when
//!
//! What one pair (acquire + release) costs on each backend, and when to pick it:
//!
//! | backend | one pair costs | pick it when |
//! |---|---|---|
//! | one Redis | 2 Lua scripts | you run Redis and a lost lock after a Redis failure is acceptable because your store checks the fence |
//! | Redis Sentinel | the same on the master (and its replication) | the same, with a replica promoted when the master fails |
//! | Redis Cluster | 2 scripts on the key's master | the same, sharded over masters |
//! | Redlock, 5 masters | 2 scripts on every master | you want no single Redis to matter, and accept the clock assumption |
//! | ZooKeeper | 2 quorum writes synced to disk (create, delete) and a listing | you run ZooKeeper, want fences that survive a restart, and hold locks for seconds, not milliseconds |
//! | etcd | 4 Raft writes synced to disk | you run etcd (Kubernetes), need Go and `etcdctl lock` to exclude with you |
//! | PostgreSQL lease table | 2 commits | your data is in PostgreSQL: check the fence in the same transaction ([`postgres`]) |
//! | PostgreSQL advisory | 2 statements, one connection held per lock | the same, with few long-held locks and no PgBouncer transaction pooling |
//!
//! Consensus backends pay a disk sync per write, so they suit the few long-held locks of leader
//! election and ownership (claim once, hold for long), not a lock per request.

pub mod cluster;
pub mod consul;
pub mod etcd;
pub mod features;
pub mod fencing;
pub mod postgres;
pub mod primitives;
pub mod redis;
pub mod redlock;
pub mod sentinel;
pub mod zookeeper;
