//! What must hold in every reachable state (safety), what must be reachable (so that the bound
//! is known to cover the interleaving of issue 21's item 1), each a small pure predicate.

use stateright::Property;

use crate::{
    model::OwnedShardsModel,
    state::{Buyer, Outcome, State},
};

/// Never more units sold than the sale has.
pub const NOT_OVERSOLD: &str = "never oversold (sold <= total)";
/// Units are neither created nor lost.
pub const CONSERVED: &str = "sold + remaining = total";
/// A client told 200 has its order in the store.
pub const ACKNOWLEDGED_COMMITTED: &str = "no acknowledged order that is not committed";
/// No order is written twice.
pub const COMMITTED_ONCE: &str = "no order committed twice";
/// An owner's memory of a shard it still owns (its fence is the store's) equals the store's
/// row, but for its reserved orders and for a committed batch whose answer is on the wire.
pub const MEMORY_AGREES: &str = "an owner's memory agrees with the store beyond its pending orders";
/// Nothing is left that a waiting buyer could have bought.
pub const NOTHING_STRANDED: &str = "no stock stranded at quiescence";
/// Item 1's interleaving: the answer to a committed batch is on the wire while its instance
/// already owns the shard again under a newer fence.
pub const STALE_ANSWER_AFTER_RECLAIM: &str = "a committed batch's answer arrives after its shard was claimed again";
/// A batch is refused by the fence.
pub const DEPOSED: &str = "a batch is refused by the fence";
/// The whole stock is sold.
pub const SOLD_OUT: &str = "every unit sold";

/// Every property, in the order they are reported.
pub fn all() -> Vec<Property<OwnedShardsModel>> {
    vec![
        Property::always(NOT_OVERSOLD, not_oversold),
        Property::always(CONSERVED, conserved),
        Property::always(ACKNOWLEDGED_COMMITTED, acknowledged_committed),
        Property::always(COMMITTED_ONCE, committed_once),
        Property::always(MEMORY_AGREES, memory_agrees),
        Property::always(NOTHING_STRANDED, nothing_stranded),
        Property::sometimes(STALE_ANSWER_AFTER_RECLAIM, stale_answer_after_reclaim),
        Property::sometimes(DEPOSED, deposed),
        Property::sometimes(SOLD_OUT, sold_out),
    ]
}

fn not_oversold(model: &OwnedShardsModel, state: &State) -> bool {
    sold(state) <= model.bounds.total()
}

fn conserved(model: &OwnedShardsModel, state: &State) -> bool {
    sold(state) + remaining(state) == model.bounds.total()
}

fn committed_once(_: &OwnedShardsModel, state: &State) -> bool {
    state.store.sold.iter().all(|&n| n <= 1)
}

fn deposed(_: &OwnedShardsModel, state: &State) -> bool {
    state.net.batch_answers.iter().any(|a| matches!(a.outcome, Outcome::Deposed(_)))
}

fn sold_out(model: &OwnedShardsModel, state: &State) -> bool {
    sold(state) == model.bounds.total()
}

fn sold(state: &State) -> i16 {
    state.store.sold.iter().map(|&n| i16::from(n)).sum()
}

fn remaining(state: &State) -> i16 {
    state.store.shards.iter().map(|s| i16::from(s.remaining)).sum()
}

/// A reset wipes the orders of the previous generation on purpose: only acknowledgements of the
/// current one are held to the store.
fn acknowledged_committed(_: &OwnedShardsModel, state: &State) -> bool {
    state.buyers.iter().zip(&state.store.sold).all(|(buyer, &sold)| match buyer {
        Buyer::Acknowledged(generation) => *generation != state.store.generation || sold >= 1,
        _ => true,
    })
}

fn memory_agrees(_: &OwnedShardsModel, state: &State) -> bool {
    state.instances.iter().filter(|inst| inst.owner.generation == state.store.generation).all(|inst| {
        let owner = &inst.owner;
        owner.shards.iter().enumerate().all(|(shard, ownership)| {
            let Some(o) = ownership else { return true };
            let shard = shard as u8;
            let ours = owner.awaiting.as_ref().filter(|b| b.fence_of(shard) == Some(o.fence));
            let held = owner.pending.iter().filter(|p| p.shard == shard).count() as i8 + ours.map_or(0, |b| b.taken(shard));
            let row = state.store.shards[usize::from(shard)];
            if row.fence != o.fence {
                // Deposed (it will learn so from its next batch): only its own books must add up.
                return o.reserved() == held;
            }
            let landed: i8 = state
                .net
                .batch_answers
                .iter()
                .filter(|a| a.outcome == Outcome::Committed && Some(&a.batch) == ours)
                .map(|a| a.batch.taken(shard))
                .sum();
            o.reserved() == held && row.remaining == o.committed - landed
        })
    })
}

/// At quiescence (nothing but faults can happen), every buyer has been answered: a buyer still
/// waiting then could only have bought what the system no longer offers (memory, hints or a
/// lock say "nothing" while the store has stock), or be sold out, which `SoldOut` would answer.
fn nothing_stranded(model: &OwnedShardsModel, state: &State) -> bool {
    use stateright::Model;
    if state.buyers.iter().all(|b| !matches!(b, Buyer::Waiting | Buyer::Decided)) {
        return true;
    }
    let mut actions = Vec::new();
    model.actions(state, &mut actions);
    actions.iter().any(|a| model.is_progress(state, a))
}

fn stale_answer_after_reclaim(_: &OwnedShardsModel, state: &State) -> bool {
    state.net.batch_answers.iter().any(|a| {
        a.outcome == Outcome::Committed
            && a.batch.shards.iter().any(|bs| {
                let owner = &state.instances[usize::from(a.batch.instance)].owner;
                owner.generation == a.batch.generation && owner.shards[usize::from(bs.shard)].is_some_and(|o| o.fence > bs.fence)
            })
    })
}
