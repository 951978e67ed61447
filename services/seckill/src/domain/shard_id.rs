use std::fmt;

use serde::Serialize;

/// One shard of a sale's stock: an index from 0 to `shards - 1`. Each shard has its own lock,
/// fence and row. Serializes as its index (a plain number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ShardId(u32);

impl ShardId {
    /// The shard with index `index`.
    pub fn new(index: u32) -> Self {
        Self(index)
    }

    /// Its index.
    pub fn get(self) -> u32 {
        self.0
    }

    /// Its index as PostgreSQL stores it.
    pub fn as_sql(self) -> i32 {
        self.0 as i32
    }
}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
