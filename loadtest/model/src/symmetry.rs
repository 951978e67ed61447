//! Symmetry reduction: instances are interchangeable (same code, same settings), so a state and
//! the same state with instance numbers permuted are checked once. The representative of a
//! state is the least of its renamings.

use crate::state::{Batch, Claim, InstanceId, State};

/// The least renaming of `state` under every permutation of its instances.
pub fn representative(state: &State) -> State {
    permutations(state.instances.len()).iter().map(|to| renamed(state, to)).min().expect("at least the identity")
}

/// `state` with instance `i` renamed `to[i]`.
fn renamed(state: &State, to: &[InstanceId]) -> State {
    let rename = |i: InstanceId| to[usize::from(i)];
    let claim = |c: &Claim| Claim { instance: rename(c.instance), ..*c };
    let batch = |b: &Batch| Batch { instance: rename(b.instance), ..b.clone() };
    let mut next = state.clone();
    for (old, inst) in state.instances.iter().enumerate() {
        let moved = &mut next.instances[usize::from(to[old])];
        *moved = inst.clone();
        moved.claiming = inst.claiming.as_ref().map(claim);
        moved.owner.awaiting = inst.owner.awaiting.as_ref().map(batch);
        moved.orphans = inst.orphans.iter().map(batch).collect();
        moved.orphans.sort_unstable();
    }
    for holder in next.locks.holders.iter_mut().flatten() {
        holder.instance = rename(holder.instance);
    }
    for sent in &mut next.net.claims {
        sent.request = claim(&sent.request);
    }
    for answer in &mut next.net.claim_answers {
        answer.claim = claim(&answer.claim);
    }
    for sent in &mut next.net.batches {
        sent.request = batch(&sent.request);
    }
    for answer in &mut next.net.batch_answers {
        answer.batch = batch(&answer.batch);
    }
    next.net.normalise();
    next
}

/// Every permutation of `0..n`.
fn permutations(n: usize) -> Vec<Vec<InstanceId>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut all = Vec::new();
    for shorter in permutations(n - 1) {
        for at in 0..n {
            let mut p = shorter.clone();
            p.insert(at, (n - 1) as InstanceId);
            all.push(p);
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_of_three_are_six_and_distinct() {
        let mut all = permutations(3);
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 6);
    }
}
