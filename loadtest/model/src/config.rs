//! What is checked: which variant of the protocol, and the bound that keeps the state space
//! finite (shards, stock, buyers, fences, faults).

/// Which bookkeeping and which batch write the owners use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The protocol as it must be: every batch result carries the fence it was sent under and is
    /// applied only to the ownership with that fence; the loss watcher, the deposed and failed
    /// batch paths and `give_back` act only on the ownership with their fence; the batch write is
    /// guarded by `WHERE fence = t`.
    Fixed,
    /// The bookkeeping before the fix of issue 21, item 1: a batch result, a deposed or failed batch and
    /// `give_back` act on whatever ownership of the shard exists now, whatever its fence. The
    /// control that must show item 1's counterexample.
    ShardKeyed,
    /// `owned-unfenced`: the batch write lacks its fence predicate (`p_fenced = false`), nothing
    /// else changes. The control that must oversell.
    Unfenced,
    /// `Fixed`, except that a deposed batch puts its orders on the shards that were not deposed
    /// back into the pending orders whether or not the ownership they were reserved on is still
    /// there (as `batcher::commit`'s `Deposed` arm did before that fix). With two shards, such an order
    /// lands in a newer ownership that never reserved it. The control of that check.
    RequeueUnchecked,
}

impl Variant {
    /// Whether results and forgets are matched to the ownership by (shard, fence).
    pub fn keyed_by_fence(self) -> bool {
        !matches!(self, Self::ShardKeyed)
    }

    /// Whether the batch commit checks and writes under `WHERE fence = t`.
    pub fn fenced_write(self) -> bool {
        !matches!(self, Self::Unfenced)
    }

    /// Whether a deposed batch's orders on other shards keep their reservation only while the
    /// ownership they were made on (its fence) is still there.
    pub fn requeue_checks_ownership(self) -> bool {
        matches!(self, Self::Fixed | Self::Unfenced)
    }
}

/// The bound of one check. Every count is small on purpose: the checker visits every
/// interleaving of every action within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// Owner instances (seckill processes).
    pub instances: u8,
    /// Stock of each shard at the start (and after a reset); the number of entries is the
    /// number of shards.
    pub stock: &'static [i8],
    /// Buyers, each placing one order of one unit, without an idempotency key (so nothing but
    /// the protocol keeps an order from being committed twice).
    pub buyers: u8,
    /// The highest fence the lock service may grant: states past it are not explored.
    pub max_fence: u8,
    /// How often the lock service may lose its data (counters and leases).
    pub data_losses: u8,
    /// How often the sale may be reset.
    pub resets: u8,
}

impl Bounds {
    /// Units on sale.
    pub fn total(&self) -> i16 {
        self.stock.iter().map(|&s| i16::from(s)).sum()
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.stock.len()
    }
}

impl Bounds {
    /// Two instances, one shard of two units, two buyers, four grants and one reset of the sale.
    pub const WITH_RESET: Self = Self { instances: 2, stock: &[2], buyers: 2, max_fence: 4, data_losses: 0, resets: 1 };

    /// Two instances, one shard of two units, two buyers, three grants and one loss of the lock
    /// service's data (so fences repeat, claims are refused and the counter is re-seeded).
    pub const WITH_DATA_LOSS: Self = Self { instances: 2, stock: &[2], buyers: 2, max_fence: 3, data_losses: 1, resets: 0 };

    /// Two instances, two shards of one unit each, two buyers and four grants: batches that
    /// write two shards, of which one may be deposed.
    pub const TWO_SHARDS: Self = Self { instances: 2, stock: &[1, 1], buyers: 2, max_fence: 4, data_losses: 0, resets: 0 };
}

impl Default for Bounds {
    /// [`Bounds::WITH_RESET`].
    fn default() -> Self {
        Self::WITH_RESET
    }
}
