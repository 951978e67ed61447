//! The steps of the modelled system. The crate's docs name the code each one stands for.

use std::fmt;

use crate::state::{Batch, BatchAnswer, BuyerId, Claim, ClaimAnswer, InstanceId, Sent, ShardIx};

/// One atomic step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// A waiting buyer's order is decided against an owner's memory.
    Decide {
        /// The buyer.
        buyer: BuyerId,
        /// The instance that decides it.
        instance: InstanceId,
        /// The shard its unit is reserved on.
        shard: ShardIx,
    },
    /// A waiting buyer is told "sold out" (the store has no stock left).
    SoldOut {
        /// The buyer.
        buyer: BuyerId,
    },
    /// An instance short of stock takes a free shard's lock (a grant: the counter goes up) and
    /// sends the claim.
    TakeShard {
        /// The instance.
        instance: InstanceId,
        /// The shard.
        shard: ShardIx,
    },
    /// The store runs a claim.
    StoreClaim(Sent<Claim>),
    /// An instance reads the answer to its claim.
    ClaimAnswered(ClaimAnswer),
    /// An instance stops waiting for its claim (no answer within the bound).
    ClaimTimeout {
        /// The instance.
        instance: InstanceId,
    },
    /// A batcher sends everything decided since its last batch.
    SendBatch {
        /// The instance.
        instance: InstanceId,
    },
    /// The store runs a batch.
    StoreBatch(Sent<Batch>),
    /// A batcher reads the answer to the batch it waits for.
    BatchAnswered(BatchAnswer),
    /// A batcher stops waiting for its batch (no answer within the bound): unknown fate.
    BatchTimeout {
        /// The instance.
        instance: InstanceId,
        /// Whether it is the batch of an owner closed by a reset.
        orphan: bool,
    },
    /// A lease runs out (the watchdog could not renew it, or the process paused).
    Expire {
        /// The shard.
        shard: ShardIx,
    },
    /// An owner's loss watcher sees its lease gone and forgets the shard.
    NoticeLoss {
        /// The instance.
        instance: InstanceId,
        /// The shard.
        shard: ShardIx,
    },
    /// An owner hands back a shard with nothing reserved (idle, retiring, or empty).
    Surrender {
        /// The instance.
        instance: InstanceId,
        /// The shard.
        shard: ShardIx,
    },
    /// The lock service restarts without its data: leases, fence counter and hints are gone.
    DataLoss,
    /// The sale is reset: a new generation, the stock restored, orders wiped, fences kept.
    Reset,
    /// An instance serving a request of the new generation closes its previous owner.
    Refresh {
        /// The instance.
        instance: InstanceId,
    },
}

impl Action {
    /// Whether this is a fault the environment may or may not inject. A state where only
    /// faults are possible is quiescent: the system left alone does nothing more.
    pub fn is_fault(&self) -> bool {
        matches!(self, Self::ClaimTimeout { .. } | Self::BatchTimeout { .. } | Self::Expire { .. } | Self::DataLoss | Self::Reset)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decide { buyer, instance, shard } => write!(f, "i{instance} decides b{buyer}'s order against S{shard} in memory"),
            Self::SoldOut { buyer } => write!(f, "b{buyer} is told sold out"),
            Self::TakeShard { instance, shard } => write!(f, "i{instance} takes S{shard}'s lock and sends its claim"),
            Self::StoreClaim(c) => write!(f, "store runs claim {c}"),
            Self::ClaimAnswered(a) => write!(f, "i{} reads {a}", a.claim.instance),
            Self::ClaimTimeout { instance } => write!(f, "i{instance} stops waiting for its claim"),
            Self::SendBatch { instance } => write!(f, "i{instance}'s batcher sends its pending orders"),
            Self::StoreBatch(b) => write!(f, "store runs batch {b}"),
            Self::BatchAnswered(a) => write!(f, "i{} reads {a}", a.batch.instance),
            Self::BatchTimeout { instance, orphan } => {
                write!(f, "i{instance} stops waiting for its {}batch (unknown fate)", if *orphan { "closed owner's " } else { "" })
            }
            Self::Expire { shard } => write!(f, "S{shard}'s lease expires"),
            Self::NoticeLoss { instance, shard } => write!(f, "i{instance}'s loss watcher forgets S{shard}"),
            Self::Surrender { instance, shard } => write!(f, "i{instance} hands S{shard} back"),
            Self::DataLoss => write!(f, "the lock service loses its data"),
            Self::Reset => write!(f, "the sale is reset"),
            Self::Refresh { instance } => write!(f, "i{instance} closes its previous generation's owner"),
        }
    }
}
