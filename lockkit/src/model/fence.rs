//! Fencing tokens: the number that makes a lease lock safe.
//!
//! Every grant of a lock increments the lock's counter in Redis and hands the new value to the
//! holder. The protected store remembers the highest fence it has seen and refuses writes that
//! carry a smaller one, so a holder that paused past its lease cannot overwrite newer work.

use std::fmt;

/// A fencing token: strictly increasing per lock name across all clients, for as long as Redis
/// keeps its data. Not gapless: a refused attempt may spend a value (on one Redis a refused first
/// attempt does; PostgreSQL's, ZooKeeper's and etcd's fences skip values too). After Redis lost its data, re-seed the counter with
/// [`LockClient::ensure_fence_at_least`](crate::LockClient::ensure_fence_at_least) from the
/// highest fence your store has accepted.
///
/// With the `serde` feature it serializes as its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(u64);

// Written out rather than derived so that the docs can mark them as the `serde` feature's.
/// As its number.
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl serde::Serialize for Fence {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// From its number.
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> serde::Deserialize<'de> for Fence {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        u64::deserialize(deserializer).map(Self)
    }
}

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

/// What [`LockClient::retire_fence`](crate::LockClient::retire_fence) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FenceRetirement {
    /// The counter was deleted; `last` was its value. Keep it where your store keeps fences.
    Retired {
        /// The last fence granted under the name.
        last: Fence,
    },
    /// Something holds or waits for the name (a lock, a permit, a reader, a queue, a lock-delay):
    /// nothing was deleted.
    InUse,
    /// The name has no counter (never granted, already retired, or Redis lost it).
    Absent,
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::Fence;

    #[test]
    fn serde_writes_and_reads_the_bare_number() {
        assert_eq!(serde_json::to_string(&Fence::new(42)).unwrap(), "42");
        assert_eq!(serde_json::from_str::<Fence>("42").unwrap(), Fence::new(42));
    }
}
