//! The fence floor of a Sentinel master: fences granted by a master promoted in a failover start
//! above every fence that any earlier master can have granted.
//!
//! Replication is asynchronous, so the replica that a failover promotes may lack the last
//! increments of a fence counter: the old master granted fence 42 and acknowledged it, the new
//! master's counter says 41, and its next grant would hand out 42 again (or, after several lost
//! grants, less than a fence that a store already accepted). Fences must never go backwards.
//!
//! Sentinel gives each failover a configuration epoch, larger than every earlier one. Before the
//! first grant of a name on a master of epoch `e > 0`, lockkit raises that name's counter to at
//! least `e << 32` (the atomic max behind `ensure_fence_at_least`). A master of an earlier epoch
//! `d < e` counted from its own floor `d << 32`, so as long as no name is granted 2^32 times under
//! one master (and no counter was seeded above 2^32 by hand), its fences are all below `e << 32`:
//! a fence granted after the failover outranks every fence granted before it, by any client,
//! whatever replication lost. Every client computes the same floor from the
//! same epoch, so the raise is idempotent. A master that never failed over (epoch 0) needs no
//! floor and costs nothing.
//!
//! Not covered: Sentinels redeployed from scratch restart their epochs at 0; the counters keep
//! their values (the raise is a max), but a later failover's floor may then be below them. Seed
//! the counters from your store (`ensure_fence_at_least`) after such a redeployment, as after
//! any loss of Redis' data.

use std::{collections::HashSet, sync::Mutex};

use crate::model::fence::Fence;

/// Names remembered as seeded, at most; past it the memory starts over (a name seeded twice
/// costs one idempotent raise), so that per-job lock names do not pile up.
const REMEMBERED: usize = 1 << 16;

/// The floor of one master (one address under one epoch) and the names already raised to it.
#[derive(Debug)]
pub(crate) struct FenceFloor {
    floor: u64,
    seeded: Mutex<HashSet<String>>,
}

impl FenceFloor {
    /// The floor of a master promoted in the failover of configuration epoch `epoch`.
    pub(crate) fn of_epoch(epoch: u64) -> Self {
        Self { floor: epoch.checked_shl(32).filter(|_| epoch < 1 << 31).unwrap_or(1 << 63), seeded: Mutex::default() }
    }

    /// The fence that `name`'s counter must be raised to before its next grant here, if any.
    pub(crate) fn pending(&self, name: &str) -> Option<Fence> {
        (self.floor > 0 && !self.seeded.lock().unwrap().contains(name)).then(|| Fence::new(self.floor))
    }

    /// `name`'s counter was raised to the floor.
    pub(crate) fn seeded(&self, name: &str) {
        let mut seeded = self.seeded.lock().unwrap();
        if seeded.len() >= REMEMBERED {
            seeded.clear();
        }
        seeded.insert(name.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_epoch_has_a_higher_floor_and_epoch_0_none() {
        assert_eq!(FenceFloor::of_epoch(0).pending("a"), None);
        let (one, two) = (FenceFloor::of_epoch(1), FenceFloor::of_epoch(2));
        assert_eq!(one.pending("a"), Some(Fence::new(1 << 32)));
        assert!(two.pending("a") > one.pending("a"));
        one.seeded("a");
        assert_eq!(one.pending("a"), None);
        assert_eq!(one.pending("b"), Some(Fence::new(1 << 32)));
    }
}
