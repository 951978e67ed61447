//! Choosing where an order's units come from, from the hints. Pure logic.
//!
//! 1. One shard that has enough, starting at a random shard so load spreads, skipping shards
//!    whose lock was just found contended: probe up to [`PROBES`] shards before waiting. More
//!    probes would cost a Redis round trip each for little: under load most shards are held.
//! 2. Then wait for the first shard with enough, from the same random start.
//! 3. If no single shard has enough but together they do (the last units of a sale, scattered):
//!    take from several shards, in ascending shard order, so concurrent gatherers lock in the
//!    same order and cannot deadlock.
//! 4. Otherwise the hints say sold out; the caller confirms with PostgreSQL.

use crate::domain::ShardId;

/// Units taken from one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// The shard.
    pub shard: ShardId,
    /// Units taken from it.
    pub take: u32,
}

/// Where an order's units come from; parts in ascending shard order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The shards and their shares.
    pub parts: Vec<Part>,
    /// Whether to wait for contended locks (otherwise: report contention and probe elsewhere).
    pub wait: bool,
}

/// What the hints suggest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Planned {
    /// Try this plan.
    Try(Plan),
    /// The hints add up to less than the quantity.
    SoldOut,
}

/// Shards tried without waiting before a request queues for one.
pub const PROBES: usize = 2;

/// Plans an order of `quantity` units given `hints` (remaining per shard, indexed by shard), the
/// shards found `contended` since the request started, and a random `start` shard index.
pub fn plan(hints: &[i64], quantity: u32, contended: &[ShardId], start: usize) -> Planned {
    let n = hints.len();
    let q = i64::from(quantity);
    let enough = |shard: usize| hints[shard] >= q;
    let rotation = (0..n).map(|i| (start + i) % n);
    let id = |shard: usize| ShardId::new(shard as u32);
    let single = |shard: usize, wait: bool| Planned::Try(Plan { parts: vec![Part { shard: id(shard), take: quantity }], wait });
    if contended.len() < PROBES
        && let Some(shard) = rotation.clone().find(|&s| enough(s) && !contended.contains(&id(s)))
    {
        return single(shard, false);
    }
    if let Some(shard) = rotation.clone().find(|&s| enough(s)) {
        return single(shard, true);
    }
    if hints.iter().map(|&h| h.max(0)).sum::<i64>() < q {
        return Planned::SoldOut;
    }
    let mut need = q;
    let mut parts = Vec::new();
    for (shard, &hint) in hints.iter().enumerate() {
        if need == 0 {
            break;
        }
        let take = hint.max(0).min(need);
        if take > 0 {
            parts.push(Part { shard: id(shard), take: take as u32 });
            need -= take;
        }
    }
    Planned::Try(Plan { parts, wait: true })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(planned: Planned) -> Vec<(u32, u32)> {
        match planned {
            Planned::Try(plan) => plan.parts.iter().map(|p| (p.shard.get(), p.take)).collect(),
            Planned::SoldOut => vec![],
        }
    }

    #[test]
    fn picks_a_shard_with_enough_starting_at_random() {
        assert_eq!(parts(plan(&[5, 5, 5], 2, &[], 1)), vec![(1, 2)]);
        assert_eq!(parts(plan(&[5, 1, 5], 2, &[], 1)), vec![(2, 2)]);
    }

    #[test]
    fn probes_uncontended_shards_before_waiting() {
        let (s0, s1) = (ShardId::new(0), ShardId::new(1));
        assert_eq!(plan(&[5, 5], 1, &[s0], 0), Planned::Try(Plan { parts: vec![Part { shard: s1, take: 1 }], wait: false }));
        assert_eq!(plan(&[5, 5], 1, &[s0, s1], 0), Planned::Try(Plan { parts: vec![Part { shard: s0, take: 1 }], wait: true }));
    }

    #[test]
    fn waits_after_two_probes() {
        let planned = plan(&[5, 5, 5, 5], 1, &[ShardId::new(1), ShardId::new(2)], 1);
        assert_eq!(planned, Planned::Try(Plan { parts: vec![Part { shard: ShardId::new(1), take: 1 }], wait: true }));
    }

    #[test]
    fn gathers_the_last_units_from_several_shards_in_ascending_order() {
        let planned = plan(&[0, 1, 0, 1, 1], 2, &[], 4);
        assert_eq!(parts(planned.clone()), vec![(1, 1), (3, 1)]);
        assert!(matches!(planned, Planned::Try(Plan { wait: true, .. })));
    }

    #[test]
    fn sold_out_only_when_all_hints_together_fall_short() {
        assert_eq!(plan(&[0, 1, 0], 2, &[], 0), Planned::SoldOut);
        assert_eq!(plan(&[0, -3, 0], 1, &[], 0), Planned::SoldOut);
    }
}
