//! One ownership of a shard: the shard, and the fence its lock was granted with.

use lockkit::Fence;

use super::ShardId;

/// A shard as one owner holds it. Whatever an owner learns from the store or the lock (a batch's
/// outcome, a refusal, a lost lease) is applied to the ownership with the fence it concerns,
/// never to the shard alone: a late answer to a batch sent under an earlier fence must not touch
/// the memory of a newer claim of the same shard.
///
/// Ordered by shard, then fence, so a sorted list of claims is in the shards' lock order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardClaim {
    /// The shard.
    pub shard: ShardId,
    /// The fence of the lock grant the shard was claimed with.
    pub fence: Fence,
}

impl std::fmt::Display for ShardClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.shard, self.fence)
    }
}
