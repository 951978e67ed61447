#![doc = include_str!("../README.md")]
//!
//! # Layout
//!
//! Layers, each depending only on those below it (`scripts/module_cycles.py`, run by `make test`,
//! fails on any import circle):
//!
//! | layer | modules | what lives there |
//! |---|---|---|
//! | API | `client`, `acquire`, `guard`, `run`, `election`, `primitives`, `retire`, `inspect` | [`LockClient`] and its builder, [`Acquire`] and the wait loop, [`LockGuard`], work under a lock ([`LockGuard::run`], [`LockClient::with_lock`]), leader election ([`Election`]), the primitives' constructors, fence retirement, [`LockClient::inspect`] |
//! | tasks | `core`, `watchdog`, `registry`, `lease`, `wake`, `jobs` | what a client, its guards and its watchdog share; batched renewals and loss detection; the leases held and their timetables; wake-ups on release; background work |
//! | backends | `backend` | the neutral `Backend` seam and each backend; the Redis layer (`backend::redis`) owns every Lua script |
//! | data | `model` | [`Fence`], [`Error`], [`LeaseLoss`], [`BackendKind`] and [`Capability`], lock keys, what a lease holds, grants and renewals, [`LockInfo`], [`Leader`], settings |
//! | support | `clock`, `glob`, `metrics` | the lease clock (`CLOCK_BOOTTIME`), name patterns, metric names |
//! | documentation | [`guide`] | a page per backend, fencing, the primitives, the features in detail |

#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod acquire;
mod backend;
mod client;
mod clock;
mod core;
mod election;
#[cfg(any(feature = "zookeeper", feature = "etcd", feature = "postgres"))]
mod glob;
mod guard;
pub mod guide;
mod inspect;
mod jobs;
mod lease;
mod metrics;
mod model;
mod primitives;
mod registry;
mod retire;
mod run;
mod wake;
mod watchdog;

pub use acquire::Acquire;
pub use client::{DEFAULT_LEASE, LockClient, LockClientBuilder};
pub use election::{Election, Leadership, Observer};
pub use guard::LockGuard;
#[doc(hidden)]
pub use model::controls::Unprotected;
pub use model::{
    backend_kind::{BackendKind, Capability},
    error::{Error, ErrorKind, Result},
    fence::{Fence, FenceRetirement},
    keys::MAX_NAME_LEN,
    leader::Leader,
    lease_loss::LeaseLoss,
    lock_info::{Holder, HolderRole, LockInfo, LockKind, Waiter},
};
pub use primitives::{
    multi::{MultiAcquire, MultiGuard},
    read_write::ReadWriteLock,
};
