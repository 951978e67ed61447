#![doc = include_str!("../README.md")]
//!
//! # Layout
//!
//! | module | what lives there |
//! |---|---|
//! | `client` | [`LockClient`] and its builder: settings, fence re-seeding |
//! | `connections` | long-lived multiplexed connections taken from a deadpool pool |
//! | `acquire` | [`Acquire`]: the acquire script round trip and the wait loop |
//! | `guard` | [`LockGuard`]: fence, loss signal, extend, release |
//! | `lease` | shared state of a granted lease and its renewal timetable; [`LeaseLoss`] |
//! | `watchdog` | the background task: batched renewals, loss detection, background releases |
//! | `wake` | the pub/sub connection that wakes waiters on release |
//! | `fence` | [`Fence`], the fencing token |
//! | `keys` | key names of a lock (one hash tag per lock) |
//! | `scripts` | the Lua scripts |
//! | `inspect` | [`LockInfo`]: read-only views for operators |
//! | `metrics` | metric names (the `metrics` facade; no exporter here) |
//! | `error` | [`Error`], [`ErrorKind`] |

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod acquire;
mod client;
mod connections;
mod error;
mod fence;
mod guard;
mod inspect;
mod keys;
mod lease;
mod metrics;
mod scripts;
mod wake;
mod watchdog;

pub use acquire::Acquire;
pub use client::{DEFAULT_LEASE, LockClient, LockClientBuilder};
pub use error::{Error, ErrorKind, Result};
pub use fence::Fence;
pub use guard::LockGuard;
pub use inspect::LockInfo;
pub use keys::MAX_NAME_LEN;
pub use lease::LeaseLoss;
