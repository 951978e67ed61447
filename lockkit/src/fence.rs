//! Fencing tokens: the number that makes a lease lock safe.
//!
//! Every grant of a lock increments the lock's counter in Redis and hands the new value to the
//! holder. The protected store remembers the highest fence it has seen and refuses writes that
//! carry a smaller one, so a holder that paused past its lease cannot overwrite newer work.

use std::fmt;

/// A fencing token: strictly increasing per lock name across all clients, for as long as Redis
/// keeps its data. After Redis lost its data, re-seed the counter with
/// [`LockClient::ensure_fence_at_least`](crate::LockClient::ensure_fence_at_least) from the
/// highest fence your store has accepted.
///
/// With the `serde` feature it serializes as its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(transparent))]
pub struct Fence(u64);

impl Fence {
    /// Wraps a raw counter value (e.g. one read back from your store).
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The value as a signed 64-bit integer, e.g. for a PostgreSQL `bigint` column. Redis counters
    /// are signed 64-bit, so this never truncates.
    pub const fn as_i64(self) -> i64 {
        self.0 as i64
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Fence> for u64 {
    fn from(f: Fence) -> u64 {
        f.0
    }
}
