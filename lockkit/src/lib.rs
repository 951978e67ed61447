#![doc = include_str!("../README.md")]
//!
//! # Layout
//!
//! | module | what lives there |
//! |---|---|
//! | `client` | [`LockClient`] and its builder: a façade that validates settings, connects and starts the tasks; fence re-seeding |
//! | `core` | what a client, its guards and its watchdog share (backend, settings, lease registry, job queue), and the idempotent release |
//! | `backend` | the seam to the servers ([`BackendKind`]): one Redis, Redis Cluster, Redlock, ZooKeeper, etcd, a PostgreSQL lease table, PostgreSQL advisory locks (the last four behind features); the connection URL; the eviction-policy check at connect |
//! | `connections` | long-lived multiplexed connections taken from a deadpool pool (one Redis, each Redlock node) |
//! | `acquire` | [`Acquire`]: the acquire script round trip and the wait loop, for every primitive; lock-delay |
//! | `hold` | what a lease holds (plain lock, reentrant grant, read share, write grant, permit, fair waiter) and so which scripts acquire, extend and release it |
//! | `primitives` | reentrant, fair, read-write, semaphore and multi-lock: their scripts and constructors on [`LockClient`] |
//! | `retire` | [`LockClient::retire_fence`]: fence counter hygiene for names that will not be used again |
//! | `guard` | [`LockGuard`]: fence, loss signal, extend, release |
//! | `election` | [`Election`], [`Leadership`], [`Observer`]: leader election on every backend, a lock that carries a value; each backend's layout |
//! | `leader` | [`Leader`]: who leads an election (data) |
//! | `lease` | shared state of a granted lease, its local deadline and renewal timetable; [`LeaseLoss`] |
//! | `registry` | the leases a client holds and when the watchdog looks at them next |
//! | `watchdog` | the background task: batched renewals, loss detection, background releases |
//! | `wake` | the pub/sub connection that wakes waiters on release |
//! | `controls` | test-only switches that each remove one protection (hidden) |
//! | `clock` | the lease clock (`CLOCK_BOOTTIME` on Linux: it counts a suspend) |
//! | `fence` | [`Fence`], the fencing token |
//! | `glob` | lock-name patterns for the backends that cannot let the server match them (ZooKeeper, etcd, PostgreSQL) |
//! | `keys` | key names of a lock (one hash tag per lock) |
//! | `scripts` | the plain lock's Lua scripts, and `Call`: one script invocation that any backend runs or pipelines |
//! | `inspect` | [`LockInfo`]: read-only views for operators (holders, queues, permits, lock-delay per primitive) |
//! | `metrics` | metric names (the `metrics` facade; no exporter here) |
//! | `error` | [`Error`], [`ErrorKind`] |
//!
//! Dependencies point one way: `client` → `acquire` → `guard` → `core` → `backend` (→
//! `connections`, `scripts`, `wake`) and `registry` → `lease` → `clock`; `watchdog` → `core`;
//! nothing depends on `client` but `inspect`.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod acquire;
mod backend;
mod client;
mod clock;
mod connections;
mod controls;
mod core;
mod election;
mod error;
mod fence;
#[cfg(any(feature = "zookeeper", feature = "etcd", feature = "postgres"))]
mod glob;
mod guard;
mod hold;
mod inspect;
mod keys;
mod leader;
mod lease;
mod metrics;
mod primitives;
mod registry;
mod retire;
mod scripts;
mod wake;
mod watchdog;

pub use acquire::Acquire;
pub use backend::BackendKind;
pub use client::{DEFAULT_LEASE, LockClient, LockClientBuilder};
#[doc(hidden)]
pub use controls::Unprotected;
pub use election::{Election, Leadership, Observer};
pub use error::{Error, ErrorKind, Result};
pub use fence::Fence;
pub use guard::LockGuard;
pub use inspect::{Holder, HolderRole, LockInfo, LockKind, Waiter};
pub use keys::MAX_NAME_LEN;
pub use leader::Leader;
pub use lease::LeaseLoss;
pub use primitives::{
    multi::{MultiAcquire, MultiGuard},
    read_write::ReadWriteLock,
};
pub use retire::FenceRetirement;
