//! The state of the modelled system: the store (PostgreSQL), the lock service (Redis through
//! lockkit), the hints, the owner instances with their memory, the buyers, and the messages in
//! flight between them. Every collection that stands for an unordered set is kept sorted, so two
//! interleavings that reach the same situation reach the same state.

use std::fmt;

/// A seckill instance.
pub type InstanceId = u8;
/// A shard of the sale.
pub type ShardIx = u8;
/// A buyer (and its one order).
pub type BuyerId = u8;
/// A fencing token granted by the lock service.
pub type Fence = u8;
/// A generation of the sale (a reset starts the next one).
pub type Generation = u8;

/// Everything the checker explores.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// PostgreSQL: the `sales`, `shards` and `orders` rows.
    pub store: Store,
    /// The shard locks: leases and the fence counter.
    pub locks: Locks,
    /// The hints in Redis (`None`: lost with the lock service's data).
    pub hints: Option<Hints>,
    /// The owner instances.
    pub instances: Vec<Instance>,
    /// Where each buyer's order stands.
    pub buyers: Vec<Buyer>,
    /// Requests and answers on the wire.
    pub net: Network,
    /// Losses of the lock service's data still allowed by the bound.
    pub data_losses_left: u8,
    /// Resets still allowed by the bound.
    pub resets_left: u8,
}

/// The store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Store {
    /// `sales.generation`.
    pub generation: Generation,
    /// `shards` rows.
    pub shards: Vec<StoreShard>,
    /// How many committed `orders` rows each buyer has in this generation.
    pub sold: Vec<u8>,
}

/// One `shards` row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoreShard {
    /// The highest fence a claim set (kept across resets).
    pub fence: Fence,
    /// `remaining`.
    pub remaining: i8,
}

/// The hints: which shards have stock, for the generation they were built for. A read of
/// another generation's hints rebuilds them from the store; a write (`Hints::set`) does not
/// look at the generation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hints {
    /// The generation they were built for.
    pub generation: Generation,
    /// Per shard: whether the hint is above 0.
    pub stocked: Vec<bool>,
}

/// The lock service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Locks {
    /// The fence counter (one for all shards is enough: fences only need to grow).
    pub counter: Fence,
    /// Who holds each shard's lease.
    pub holders: Vec<Option<Holder>>,
}

/// The holder of a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Holder {
    /// The instance.
    pub instance: InstanceId,
    /// The fence of its grant.
    pub fence: Fence,
}

/// One seckill instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Instance {
    /// Its `SaleOwner` of the sale's current generation as it knows it.
    pub owner: Owner,
    /// Batches of owners closed by a reset whose batcher still waits for the answer.
    pub orphans: Vec<Batch>,
    /// The claim `take_shard` is waiting for (one acquisition at a time).
    pub claiming: Option<Claim>,
}

/// A `SaleOwner`: its shards in memory, decided orders, and the batch in flight.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// The generation it sells.
    pub generation: Generation,
    /// `State::shards`, keyed by shard number.
    pub shards: Vec<Option<Ownership>>,
    /// Decided orders waiting for the next batch.
    pub pending: Vec<Order>,
    /// The batch the batcher waits for.
    pub awaiting: Option<Batch>,
}

/// One owned shard in memory (`OwnedShard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ownership {
    /// The fence it was claimed with.
    pub fence: Fence,
    /// Stock as last committed.
    pub committed: i8,
    /// `committed` minus the units reserved by orders not yet committed.
    pub available: i8,
}

impl Ownership {
    /// Units reserved by orders not yet committed (`OwnedShard::reserved`).
    pub fn reserved(&self) -> i8 {
        self.committed - self.available
    }
}

/// A decided order: one unit of one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Order {
    /// Who placed it.
    pub buyer: BuyerId,
    /// The shard its unit is reserved on.
    pub shard: ShardIx,
}

/// What a batch knows of one shard (`BatchShard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchShard {
    /// The shard.
    pub shard: ShardIx,
    /// The fence it was sent under.
    pub fence: Fence,
    /// The stock the owner last committed.
    pub committed: i8,
}

/// A batch commit (`seckill_commit_orders`' arguments).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Batch {
    /// The sender.
    pub instance: InstanceId,
    /// The generation its orders were decided in.
    pub generation: Generation,
    /// The shards it writes.
    pub shards: Vec<BatchShard>,
    /// Its orders.
    pub orders: Vec<Order>,
}

impl Batch {
    /// The fence the batch was sent under for `shard`.
    pub fn fence_of(&self, shard: ShardIx) -> Option<Fence> {
        self.shards.iter().find(|s| s.shard == shard).map(|s| s.fence)
    }

    /// Units the batch takes from `shard`.
    pub fn taken(&self, shard: ShardIx) -> i8 {
        self.orders.iter().filter(|o| o.shard == shard).count() as i8
    }
}

/// A claim (`seckill_claim`'s arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Claim {
    /// The claiming instance.
    pub instance: InstanceId,
    /// The generation it claims for.
    pub generation: Generation,
    /// The shard.
    pub shard: ShardIx,
    /// The fence its lock was granted with.
    pub fence: Fence,
}

/// The store's answer to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimAnswer {
    /// The claim answered.
    pub claim: Claim,
    /// The shard's stock, or `None` when a claim with this or a newer fence came first (or the
    /// generation is not the sale's).
    pub remaining: Option<i8>,
}

/// What became of a batch (`BatchOutcome`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// Every order written.
    Committed,
    /// Nothing written: these shards carry another fence.
    Deposed(Vec<ShardIx>),
    /// Nothing written: the sale was reset.
    StaleSale,
}

/// The store's answer to a batch.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchAnswer {
    /// The batch answered (the batcher matches the answer to the batch it waits for).
    pub batch: Batch,
    /// Its outcome.
    pub outcome: Outcome,
}

/// A request on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sent<T> {
    /// What was sent.
    pub request: T,
    /// Whether its sender still waits for the answer (a timed-out request still runs when it
    /// reaches the store, but its answer goes nowhere).
    pub awaited: bool,
}

/// Messages in flight, each delivered in any order, at any later time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Network {
    /// Claims sent, not yet run by the store.
    pub claims: Vec<Sent<Claim>>,
    /// Claim answers not yet read by their instance.
    pub claim_answers: Vec<ClaimAnswer>,
    /// Batches sent, not yet run by the store.
    pub batches: Vec<Sent<Batch>>,
    /// Batch answers not yet read by their batcher.
    pub batch_answers: Vec<BatchAnswer>,
}

impl Network {
    /// Whether nothing is on the wire.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.claim_answers.is_empty() && self.batches.is_empty() && self.batch_answers.is_empty()
    }

    /// Sorts every collection (they are sets: delivery order is chosen by the checker).
    pub fn normalise(&mut self) {
        self.claims.sort_unstable();
        self.claim_answers.sort_unstable();
        self.batches.sort_unstable();
        self.batch_answers.sort_unstable();
    }
}

/// Where a buyer's order stands, as its client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buyer {
    /// Wants a unit and has no decision (a new request, or `Decided::Retry`).
    Waiting,
    /// Decided against an owner's memory, waiting for its batch.
    Decided,
    /// Answered 200 after its batch committed in this generation.
    Acknowledged(Generation),
    /// Answered with an unknown fate (`Decided::Failed`): it may or may not have landed.
    Failed,
    /// Answered "sold out".
    SoldOut,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store: Vec<String> = self.store.shards.iter().map(|s| format!("fence {} left {}", s.fence, s.remaining)).collect();
        writeln!(
            f,
            "    store: generation {}, shards [{}], sold per buyer {:?}",
            self.store.generation,
            store.join("; "),
            self.store.sold
        )?;
        let holders: Vec<String> =
            self.locks.holders.iter().map(|h| h.map_or_else(|| "free".into(), |h| format!("i{}@{}", h.instance, h.fence))).collect();
        let hints = self.hints.as_ref().map_or_else(|| "missing".into(), |h| format!("{:?} (generation {})", h.stocked, h.generation));
        writeln!(f, "    locks: counter {}, holders [{}]; hints {hints}", self.locks.counter, holders.join(", "))?;
        for (i, inst) in self.instances.iter().enumerate() {
            let owned: Vec<String> = inst
                .owner
                .shards
                .iter()
                .enumerate()
                .filter_map(|(s, o)| o.map(|o| format!("S{s}{{fence {} committed {} available {}}}", o.fence, o.committed, o.available)))
                .collect();
            write!(
                f,
                "    i{i} (generation {}): owns [{}] pending {}",
                inst.owner.generation,
                owned.join(" "),
                orders(&inst.owner.pending)
            )?;
            if let Some(b) = &inst.owner.awaiting {
                write!(f, " awaiting {b}")?;
            }
            for b in &inst.orphans {
                write!(f, " orphan {b}")?;
            }
            if let Some(c) = &inst.claiming {
                write!(f, " claiming {c}")?;
            }
            writeln!(f)?;
        }
        writeln!(f, "    buyers: {:?}", self.buyers)?;
        if !self.net.is_empty() {
            let mut wire: Vec<String> = Vec::new();
            wire.extend(self.net.claims.iter().map(|c| format!("claim {c}")));
            wire.extend(self.net.claim_answers.iter().map(|a| format!("answer {a}")));
            wire.extend(self.net.batches.iter().map(|b| format!("batch {b}")));
            wire.extend(self.net.batch_answers.iter().map(|a| format!("answer {a}")));
            writeln!(f, "    on the wire: {}", wire.join("; "))?;
        }
        Ok(())
    }
}

fn orders(orders: &[Order]) -> String {
    let all: Vec<String> = orders.iter().map(|o| format!("b{}@S{}", o.buyer, o.shard)).collect();
    format!("[{}]", all.join(" "))
}

impl fmt::Display for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shards: Vec<String> = self.shards.iter().map(|s| format!("S{} fence {} committed {}", s.shard, s.fence, s.committed)).collect();
        write!(f, "{{from i{} generation {}, {}, orders {}}}", self.instance, self.generation, shards.join(", "), orders(&self.orders))
    }
}

impl<T: fmt::Display> fmt::Display for Sent<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.request, if self.awaited { "" } else { " (nobody waits)" })
    }
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{i{} S{} fence {} generation {}}}", self.instance, self.shard, self.fence, self.generation)
    }
}

impl fmt::Display for ClaimAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.remaining {
            Some(r) => write!(f, "claim {} -> stock {r}", self.claim),
            None => write!(f, "claim {} -> refused", self.claim),
        }
    }
}

impl fmt::Display for BatchAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch {} -> {:?}", self.batch, self.outcome)
    }
}
