//! The transition system: which steps are possible in a state, and what each one does. The
//! crate's docs map every step to the code it stands for.

use stateright::{Model, Property};

use crate::{
    action::Action,
    config::{Bounds, Variant},
    properties,
    state::{
        Batch, BatchAnswer, BatchShard, Buyer, Claim, ClaimAnswer, Fence, Hints, Holder, Instance, InstanceId, Locks, Network, Order,
        Outcome, Owner, Ownership, Sent, ShardIx, State, Store, StoreShard,
    },
};

/// The owned-shards protocol of one sale, as seckill implements it, in one variant and bound.
#[derive(Debug, Clone)]
pub struct OwnedShardsModel {
    /// The variant checked.
    pub variant: Variant,
    /// The bound of the check.
    pub bounds: Bounds,
}

impl OwnedShardsModel {
    /// The model of `variant` within `bounds`.
    pub fn new(variant: Variant, bounds: Bounds) -> Self {
        Self { variant, bounds }
    }

    fn initial(&self) -> State {
        let shards = self.bounds.shards();
        State {
            store: Store {
                generation: 0,
                shards: self.bounds.stock.iter().map(|&remaining| StoreShard { fence: 0, remaining }).collect(),
                sold: vec![0; usize::from(self.bounds.buyers)],
            },
            locks: Locks { counter: 0, holders: vec![None; shards] },
            hints: None,
            instances: (0..self.bounds.instances)
                .map(|_| Instance { owner: owner(0, shards), orphans: Vec::new(), claiming: None })
                .collect(),
            buyers: vec![Buyer::Waiting; usize::from(self.bounds.buyers)],
            net: Network::default(),
            data_losses_left: self.bounds.data_losses,
            resets_left: self.bounds.resets,
        }
    }

    /// Whether `action` makes progress in `state` rather than being a fault the environment
    /// may inject. A lease whose holder has no live guard any more is not renewed by anyone, so
    /// its expiry is progress.
    pub fn is_progress(&self, state: &State, action: &Action) -> bool {
        match action {
            Action::Expire { shard } => !guard_alive(state, *shard),
            other => !other.is_fault(),
        }
    }

    /// Whether a result, a forget or a give-back sent under `fence` lands in `owner`'s memory of
    /// `shard`: on the ownership with that fence, or (shard-keyed) on whatever ownership exists.
    fn target(&self, owner: &Owner, shard: ShardIx, fence: Fence) -> bool {
        lands(owner, shard, fence, self.variant.keyed_by_fence())
    }

    /// `SaleOwner::forget` as the batch paths call it (`target` picks the ownership).
    fn forget(&self, state: &mut State, instance: InstanceId, shard: ShardIx, fence: Fence) {
        forget(state, instance, shard, fence, self.variant.keyed_by_fence());
    }

    /// `SaleOwner::give_back`: returns a unit reserved under `fence` to memory.
    fn give_back(&self, state: &mut State, instance: InstanceId, shard: ShardIx, fence: Fence) {
        let owner = &mut state.instances[usize::from(instance)].owner;
        if self.target(owner, shard, fence) {
            owner.shards[usize::from(shard)].as_mut().expect("target exists").available += 1;
        }
    }

    /// `batcher::committed`: applies a committed batch to memory, answers its orders, then hands
    /// back the shards whose work is done (`finished_shards`).
    fn committed(&self, state: &mut State, batch: &Batch) {
        let i = usize::from(batch.instance);
        for order in &batch.orders {
            let fence = batch.fence_of(order.shard).expect("a batch carries the shards of its orders");
            if self.target(&state.instances[i].owner, order.shard, fence) {
                state.instances[i].owner.shards[usize::from(order.shard)].as_mut().expect("target exists").committed -= 1;
            }
            state.buyers[usize::from(order.buyer)] = Buyer::Acknowledged(batch.generation);
        }
        for shard in 0..state.instances[i].owner.shards.len() {
            let done = state.instances[i].owner.shards[shard].filter(|o| o.reserved() == 0 && o.committed <= 0);
            if let Some(o) = done {
                state.instances[i].owner.shards[shard] = None;
                surrender(state, batch.instance, shard as ShardIx, o);
            }
        }
    }

    /// `batcher::commit`'s `Deposed` arm.
    fn deposed(&self, state: &mut State, batch: &Batch, deposed: &[ShardIx]) {
        for &shard in deposed {
            self.forget(state, batch.instance, shard, batch.fence_of(shard).expect("deposed shards are the batch's"));
        }
        for order in &batch.orders {
            let fence = batch.fence_of(order.shard).expect("the batch's shard");
            // An order keeps its reservation only where it was made: on a shard not deposed whose
            // ownership of the batch's fence is still here. Today's code (`ShardKeyed`,
            // `RequeueUnchecked`) keeps it whatever is there now.
            let still_there = !self.variant.requeue_checks_ownership()
                || self.target(&state.instances[usize::from(batch.instance)].owner, order.shard, fence);
            let keep = !deposed.contains(&order.shard) && still_there;
            if keep {
                state.instances[usize::from(batch.instance)].owner.pending.push(*order);
            } else {
                self.give_back(state, batch.instance, order.shard, fence);
                state.buyers[usize::from(order.buyer)] = Buyer::Waiting;
            }
        }
    }

    /// `seckill_commit_orders`.
    fn run_batch(&self, state: &mut State, batch: &Batch) -> Outcome {
        if batch.generation != state.store.generation {
            return Outcome::StaleSale;
        }
        if self.variant.fenced_write() {
            let deposed: Vec<ShardIx> =
                batch.shards.iter().filter(|s| state.store.shards[usize::from(s.shard)].fence != s.fence).map(|s| s.shard).collect();
            if !deposed.is_empty() {
                return Outcome::Deposed(deposed);
            }
        }
        for order in &batch.orders {
            state.store.sold[usize::from(order.buyer)] += 1;
        }
        for s in &batch.shards {
            let row = &mut state.store.shards[usize::from(s.shard)];
            if !self.variant.fenced_write() || row.fence == s.fence {
                row.remaining = s.committed - batch.taken(s.shard);
            }
        }
        Outcome::Committed
    }

    /// The shard `SaleOwner::decide` reserves one unit on: the usable one with the least
    /// stock (the first of equals), if any.
    fn reservable(owner: &Owner) -> Option<ShardIx> {
        owner
            .shards
            .iter()
            .enumerate()
            .filter_map(|(s, o)| o.filter(|o| o.available > 0).map(|o| (o.available, s)))
            .min()
            .map(|(_, s)| s as ShardIx)
    }

    /// The hints as `Hints::read` returns them: rebuilt from the store when missing or of
    /// another generation.
    fn read_hints(state: &State) -> Hints {
        match &state.hints {
            Some(h) if h.generation == state.store.generation => h.clone(),
            _ => Hints { generation: state.store.generation, stocked: state.store.shards.iter().map(|s| s.remaining > 0).collect() },
        }
    }
}

/// Whether something sent under `fence` lands on `owner`'s ownership of `shard`: only on the
/// ownership with that fence when `by_fence`, else on whatever ownership exists now.
fn lands(owner: &Owner, shard: ShardIx, fence: Fence, by_fence: bool) -> bool {
    owner.shards[usize::from(shard)].is_some_and(|o| !by_fence || o.fence == fence)
}

/// `SaleOwner::forget`: drops the ownership of `shard` (as `lands` picks it), releases its
/// lock (owner-checked) and sends the orders pending on it back to be decided again.
fn forget(state: &mut State, instance: InstanceId, shard: ShardIx, fence: Fence, by_fence: bool) {
    let owner = &mut state.instances[usize::from(instance)].owner;
    if !lands(owner, shard, fence, by_fence) {
        return;
    }
    let gone = owner.shards[usize::from(shard)].take().expect("it lands on one");
    let pending = std::mem::take(&mut owner.pending);
    let (retry, keep): (Vec<Order>, Vec<Order>) = pending.into_iter().partition(|o| o.shard == shard);
    owner.pending = keep;
    release(&mut state.locks, shard, instance, gone.fence);
    for order in retry {
        state.buyers[usize::from(order.buyer)] = Buyer::Waiting;
    }
}

fn owner(generation: u8, shards: usize) -> Owner {
    Owner { generation, shards: vec![None; shards], pending: Vec::new(), awaiting: None }
}

/// Whether the holder of `shard`'s lease still has a guard (an ownership or a claim in
/// progress), whose watchdog renews it.
fn guard_alive(state: &State, shard: ShardIx) -> bool {
    let Some(holder) = state.locks.holders[usize::from(shard)] else { return false };
    let inst = &state.instances[usize::from(holder.instance)];
    inst.owner.shards[usize::from(shard)].is_some_and(|o| o.fence == holder.fence)
        || inst.claiming.is_some_and(|c| c.shard == shard && c.fence == holder.fence)
}

/// `LockGuard::release`: owner-checked, so a stale release never frees a newer holder's lease.
fn release(locks: &mut Locks, shard: ShardIx, instance: InstanceId, fence: Fence) {
    let slot = &mut locks.holders[usize::from(shard)];
    if *slot == Some(Holder { instance, fence }) {
        *slot = None;
    }
}

/// `Hints::set(shard, 0)`: written whatever generation the hints are of.
fn hint_empty(state: &mut State, shard: ShardIx) {
    if let Some(h) = &mut state.hints {
        h.stocked[usize::from(shard)] = false;
    }
}

/// A `Surrendered` shard through `release_surrendered`: an empty one's hint goes to 0, then the
/// lock is released.
fn surrender(state: &mut State, instance: InstanceId, shard: ShardIx, gone: Ownership) {
    if gone.committed <= 0 {
        hint_empty(state, shard);
    }
    release(&mut state.locks, shard, instance, gone.fence);
}

/// The sender of `request` stops waiting for its answer; the request stays on the wire.
fn stop_waiting<T: PartialEq>(wire: &mut [Sent<T>], request: &T) {
    if let Some(sent) = wire.iter_mut().find(|s| s.awaited && s.request == *request) {
        sent.awaited = false;
    }
}

fn remove<T: PartialEq>(items: &mut Vec<T>, item: &T) -> bool {
    match items.iter().position(|x| x == item) {
        Some(at) => {
            items.remove(at);
            true
        }
        None => false,
    }
}

impl Model for OwnedShardsModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial()]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let current = |inst: &Instance| inst.owner.generation == state.store.generation;
        let store_empty = state.store.shards.iter().all(|s| s.remaining <= 0);
        let waiting = state.buyers.contains(&Buyer::Waiting);
        // Waiting buyers are interchangeable (none has an order anywhere: not in memory, not on
        // the wire, not in the store), so only the first one acts: the others' steps would reach
        // the same states with buyer numbers swapped.
        if let Some(b) = state.buyers.iter().position(|b| *b == Buyer::Waiting) {
            let mut decidable = false;
            for (i, inst) in state.instances.iter().enumerate().filter(|(_, inst)| current(inst)) {
                if let Some(shard) = Self::reservable(&inst.owner) {
                    decidable = true;
                    actions.push(Action::Decide { buyer: b as u8, instance: i as InstanceId, shard });
                }
            }
            if !decidable && store_empty {
                actions.push(Action::SoldOut { buyer: b as u8 });
            }
        }
        for (i, inst) in state.instances.iter().enumerate() {
            let instance = i as InstanceId;
            if waiting && current(inst) && inst.claiming.is_none() && Self::reservable(&inst.owner).is_none() {
                let hints = Self::read_hints(state);
                for shard in 0..state.store.shards.len() {
                    if hints.stocked[shard] && inst.owner.shards[shard].is_none() && state.locks.holders[shard].is_none() {
                        actions.push(Action::TakeShard { instance, shard: shard as ShardIx });
                    }
                }
            }
            if !current(inst) {
                actions.push(Action::Refresh { instance });
            }
            if inst.claiming.is_some() {
                actions.push(Action::ClaimTimeout { instance });
            }
            if !inst.owner.pending.is_empty() && inst.owner.awaiting.is_none() {
                actions.push(Action::SendBatch { instance });
            }
            if inst.owner.awaiting.is_some() {
                actions.push(Action::BatchTimeout { instance, orphan: false });
            }
            if !inst.orphans.is_empty() {
                actions.push(Action::BatchTimeout { instance, orphan: true });
            }
            for (shard, o) in inst.owner.shards.iter().enumerate() {
                let Some(o) = o else { continue };
                let shard = shard as ShardIx;
                if state.locks.holders[usize::from(shard)] != Some(Holder { instance, fence: o.fence }) {
                    actions.push(Action::NoticeLoss { instance, shard });
                }
                if o.reserved() == 0 {
                    actions.push(Action::Surrender { instance, shard });
                }
            }
        }
        actions.extend(state.net.claims.iter().map(|c| Action::StoreClaim(c.clone())));
        actions.extend(state.net.claim_answers.iter().map(|a| Action::ClaimAnswered(*a)));
        actions.extend(state.net.batches.iter().map(|b| Action::StoreBatch(b.clone())));
        actions.extend(state.net.batch_answers.iter().map(|a| Action::BatchAnswered(a.clone())));
        for (shard, holder) in state.locks.holders.iter().enumerate() {
            if holder.is_some() {
                actions.push(Action::Expire { shard: shard as ShardIx });
            }
        }
        if state.data_losses_left > 0 && state.locks.counter > 0 {
            actions.push(Action::DataLoss);
        }
        if state.resets_left > 0 {
            actions.push(Action::Reset);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Decide { buyer, instance, shard } => {
                let owner = &mut state.instances[usize::from(instance)].owner;
                owner.shards[usize::from(shard)].as_mut()?.available -= 1;
                owner.pending.push(Order { buyer, shard });
                state.buyers[usize::from(buyer)] = Buyer::Decided;
            }
            Action::SoldOut { buyer } => state.buyers[usize::from(buyer)] = Buyer::SoldOut,
            Action::TakeShard { instance, shard } => {
                state.hints = Some(Self::read_hints(&state));
                state.locks.counter += 1;
                let fence = state.locks.counter;
                state.locks.holders[usize::from(shard)] = Some(Holder { instance, fence });
                let inst = &mut state.instances[usize::from(instance)];
                let claim = Claim { instance, generation: inst.owner.generation, shard, fence };
                inst.claiming = Some(claim);
                state.net.claims.push(Sent { request: claim, awaited: true });
            }
            Action::StoreClaim(sent) => {
                remove(&mut state.net.claims, &sent);
                let claim = sent.request;
                let generation = state.store.generation;
                let row = &mut state.store.shards[usize::from(claim.shard)];
                let remaining = (generation == claim.generation && row.fence < claim.fence).then(|| {
                    row.fence = claim.fence;
                    row.remaining
                });
                if sent.awaited {
                    state.net.claim_answers.push(ClaimAnswer { claim, remaining });
                }
            }
            Action::ClaimAnswered(answer) => {
                remove(&mut state.net.claim_answers, &answer);
                let Claim { instance, generation, shard, fence } = answer.claim;
                let inst = &mut state.instances[usize::from(instance)];
                inst.claiming = None;
                match answer.remaining {
                    // The owner that asked was closed meanwhile: the guard goes with it.
                    _ if generation != inst.owner.generation => release(&mut state.locks, shard, instance, fence),
                    Some(remaining) if remaining > 0 => {
                        inst.owner.shards[usize::from(shard)] = Some(Ownership { fence, committed: remaining, available: remaining });
                    }
                    Some(_) => surrender(&mut state, instance, shard, Ownership { fence, committed: 0, available: 0 }),
                    None => {
                        state.locks.counter = state.locks.counter.max(state.store.shards[usize::from(shard)].fence);
                        release(&mut state.locks, shard, instance, fence);
                    }
                }
            }
            Action::ClaimTimeout { instance } => {
                let claim = state.instances[usize::from(instance)].claiming.take()?;
                state.net.claim_answers.retain(|a| a.claim != claim);
                stop_waiting(&mut state.net.claims, &claim);
                release(&mut state.locks, claim.shard, instance, claim.fence);
            }
            Action::SendBatch { instance } => {
                let owner = &mut state.instances[usize::from(instance)].owner;
                let pending = std::mem::take(&mut owner.pending);
                let (orders, retry): (Vec<Order>, Vec<Order>) =
                    pending.into_iter().partition(|o| owner.shards[usize::from(o.shard)].is_some());
                if !orders.is_empty() {
                    let mut touched: Vec<ShardIx> = orders.iter().map(|o| o.shard).collect();
                    touched.sort_unstable();
                    touched.dedup();
                    let shards = touched
                        .into_iter()
                        .map(|shard| {
                            let o = owner.shards[usize::from(shard)].expect("partitioned on it");
                            BatchShard { shard, fence: o.fence, committed: o.committed }
                        })
                        .collect();
                    let batch = Batch { instance, generation: owner.generation, shards, orders };
                    owner.awaiting = Some(batch.clone());
                    state.net.batches.push(Sent { request: batch, awaited: true });
                }
                for order in retry {
                    state.buyers[usize::from(order.buyer)] = Buyer::Waiting;
                }
            }
            Action::StoreBatch(sent) => {
                remove(&mut state.net.batches, &sent);
                let outcome = self.run_batch(&mut state, &sent.request);
                if sent.awaited {
                    state.net.batch_answers.push(BatchAnswer { batch: sent.request, outcome });
                }
            }
            Action::BatchAnswered(answer) => {
                remove(&mut state.net.batch_answers, &answer);
                let BatchAnswer { batch, outcome } = answer;
                let inst = &mut state.instances[usize::from(batch.instance)];
                if remove(&mut inst.orphans, &batch) {
                    // Its owner was closed by a reset and holds nothing: only the answers go out.
                    let answer = if outcome == Outcome::Committed { Buyer::Acknowledged(batch.generation) } else { Buyer::Waiting };
                    for order in &batch.orders {
                        state.buyers[usize::from(order.buyer)] = answer;
                    }
                } else {
                    inst.owner.awaiting = None;
                    match &outcome {
                        Outcome::Committed => self.committed(&mut state, &batch),
                        Outcome::Deposed(deposed) => self.deposed(&mut state, &batch, deposed),
                        Outcome::StaleSale => {
                            close(&mut state, batch.instance);
                            for order in &batch.orders {
                                state.buyers[usize::from(order.buyer)] = Buyer::Waiting;
                            }
                        }
                    }
                }
            }
            Action::BatchTimeout { instance, orphan } => {
                let inst = &mut state.instances[usize::from(instance)];
                let batch = if orphan { inst.orphans.remove(0) } else { inst.owner.awaiting.take()? };
                state.net.batch_answers.retain(|a| a.batch != batch);
                stop_waiting(&mut state.net.batches, &batch);
                for order in &batch.orders {
                    state.buyers[usize::from(order.buyer)] = Buyer::Failed;
                }
                if !orphan {
                    for s in &batch.shards {
                        self.forget(&mut state, instance, s.shard, s.fence);
                    }
                }
            }
            Action::Expire { shard } => state.locks.holders[usize::from(shard)] = None,
            Action::NoticeLoss { instance, shard } => {
                let fence = state.instances[usize::from(instance)].owner.shards[usize::from(shard)]?.fence;
                // The watcher belongs to one guard and stops with it: it forgets that ownership
                // in either variant.
                forget(&mut state, instance, shard, fence, true);
            }
            Action::Surrender { instance, shard } => {
                let gone = state.instances[usize::from(instance)].owner.shards[usize::from(shard)].take()?;
                surrender(&mut state, instance, shard, gone);
            }
            Action::DataLoss => {
                state.data_losses_left -= 1;
                state.locks.counter = 0;
                state.locks.holders.iter_mut().for_each(|h| *h = None);
                state.hints = None;
            }
            Action::Reset => {
                state.resets_left -= 1;
                state.store.generation += 1;
                for (row, &stock) in state.store.shards.iter_mut().zip(self.bounds.stock) {
                    row.remaining = stock;
                }
                state.store.sold.iter_mut().for_each(|s| *s = 0);
            }
            Action::Refresh { instance } => {
                close(&mut state, instance);
                let inst = &mut state.instances[usize::from(instance)];
                if let Some(batch) = inst.owner.awaiting.take() {
                    inst.orphans.push(batch);
                }
                inst.owner = owner(state.store.generation, self.bounds.shards());
            }
        }
        for inst in &mut state.instances {
            inst.owner.pending.sort_unstable();
            inst.orphans.sort_unstable();
        }
        state.net.normalise();
        Some(state)
    }

    fn format_action(&self, action: &Action) -> String {
        action.to_string()
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.locks.counter <= self.bounds.max_fence
    }
}

/// `SaleOwner::close`: the owner decides nothing more, hands every shard back and sends its
/// pending orders back to be decided again.
fn close(state: &mut State, instance: InstanceId) {
    let owner = &mut state.instances[usize::from(instance)].owner;
    let pending = std::mem::take(&mut owner.pending);
    let shards: Vec<(usize, Ownership)> = owner.shards.iter_mut().enumerate().filter_map(|(s, o)| o.take().map(|o| (s, o))).collect();
    for order in pending {
        state.buyers[usize::from(order.buyer)] = Buyer::Waiting;
    }
    for (shard, gone) in shards {
        surrender(state, instance, shard as ShardIx, gone);
    }
}
