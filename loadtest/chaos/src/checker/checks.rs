//! The checks of a run, each a pure function over the history, its resolutions or the snapshot,
//! returning its own counts and examples; [`check`](super::check) composes them into
//! [`Findings`](super::Findings). Nothing here reads PostgreSQL or talks to an instance.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{ClaimRow, OrderRow, PartRow, RefusalRow, Resolution, Resolved, Snapshot, label};
use crate::history::{Op, OpKind, OrderAck, Outcome};

/// Answers of the load and of the resolution, counted.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct StatusCounts {
    /// Outcomes of the load operations by label (`201`, `409 sold_out`, `timeout`, ...).
    pub(super) by_label: BTreeMap<String, u64>,
    /// 5xx other than 503, during the load and while resolving.
    pub(super) server_errors: u64,
    /// 503 answers during the load.
    pub(super) service_unavailable: u64,
}

/// Counts the load's outcomes by label, and the server errors of the load and the resolution.
pub(super) fn status_counts(ops: &[Op], resolutions: &[Resolved]) -> StatusCounts {
    let mut counts = StatusCounts::default();
    for outcome in ops.iter().filter_map(|op| op.outcome.as_ref()) {
        *counts.by_label.entry(label(outcome)).or_default() += 1;
        counts.server_errors += u64::from(outcome.is_server_error());
        counts.service_unavailable += u64::from(outcome.status() == Some(503));
    }
    counts.server_errors += resolutions
        .iter()
        .map(|r| u64::from(r.server_errors))
        .sum::<u64>();
    counts
}

/// An acknowledged order: the operation that placed it and the order its client was told.
pub(super) type Acked<'a> = BTreeMap<&'a str, (&'a Op, OrderAck)>;

/// What the clients were told, per key, during the load and while resolving.
#[derive(Debug, Default)]
pub(super) struct Told<'a> {
    /// Orders acknowledged, by key (a resolution's answer replaces the load's).
    pub(super) acked: Acked<'a>,
    /// Keys whose order definitely failed.
    pub(super) failed: HashSet<&'a str>,
    /// Every key the suite sent, replays included.
    pub(super) sent: HashSet<&'a str>,
    /// Orders whose outcome was unknown (info).
    pub(super) indeterminate: usize,
    /// ... of which had happened (200 on re-send).
    pub(super) resolved_happened: usize,
    /// ... of which had not, and were placed by the re-send (201).
    pub(super) resolved_placed_now: usize,
    /// ... of which had not (a refusal on re-send).
    pub(super) resolved_not_happened: usize,
    /// ... still unknown after every retry.
    pub(super) unresolved: usize,
    /// The keys still unknown.
    pub(super) examples: Vec<String>,
}

impl Told<'_> {
    /// Units in the acknowledged orders: what the clients were told they bought.
    pub(super) fn acknowledged_units(&self) -> i64 {
        self.acked
            .values()
            .map(|(op, _)| i64::from(op.invocation.quantity))
            .sum()
    }
}

/// Collects what the clients were told: the acknowledged orders and the definite failures of the
/// load, then what resolving the unknown ones showed.
pub(super) fn acknowledgements<'a>(ops: &'a [Op], resolutions: &[Resolved]) -> Told<'a> {
    let mut told = Told::default();
    for op in ops {
        told.sent.insert(&op.invocation.key);
        match (op.invocation.kind, &op.outcome) {
            (OpKind::Order, Some(Outcome::Ok { order, .. })) => {
                told.acked.insert(&op.invocation.key, (op, *order));
            }
            (OpKind::Order, Some(Outcome::Fail { .. })) => {
                told.failed.insert(&op.invocation.key);
            }
            (OpKind::Order, Some(Outcome::Info { .. })) => told.indeterminate += 1,
            (OpKind::Order, None) | (OpKind::Replay, _) => {}
        }
    }
    for r in resolutions {
        let op = &ops[r.op];
        match &r.resolution {
            Resolution::Happened(order) => {
                told.resolved_happened += 1;
                told.acked.insert(&op.invocation.key, (op, *order));
            }
            Resolution::PlacedNow(order) => {
                told.resolved_placed_now += 1;
                told.acked.insert(&op.invocation.key, (op, *order));
            }
            Resolution::NotHappened { .. } => {
                told.resolved_not_happened += 1;
                told.failed.insert(&op.invocation.key);
            }
            Resolution::Unknown { last } => {
                told.unresolved += 1;
                told.examples.push(format!(
                    "unresolved: key {} still unknown ({last})",
                    op.invocation.key
                ));
            }
        }
    }
    told
}

/// A count, and examples of what was counted.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Counted {
    /// How many.
    pub(super) count: usize,
    /// What each one was.
    pub(super) examples: Vec<String>,
}

impl Counted {
    fn add(&mut self, example: String) {
        self.count += 1;
        self.examples.push(example);
    }
}

/// Replays that did not answer 200 with the original order (unknown answers and refusals without
/// an answer, `0` or `503`, are not counted: the replay said nothing).
pub(super) fn replay_mismatches(ops: &[Op], acked: &Acked<'_>) -> Counted {
    let mut mismatches = Counted::default();
    for op in ops.iter().filter(|op| op.invocation.kind == OpKind::Replay) {
        match (&op.outcome, acked.get(op.invocation.key.as_str())) {
            (Some(Outcome::Ok { status: 200, order }), Some((_, original)))
                if order.order_id == original.order_id => {}
            (
                Some(
                    Outcome::Info { .. }
                    | Outcome::Fail {
                        status: 0 | 503, ..
                    },
                ),
                _,
            ) => {}
            (outcome, _) => mismatches.add(format!(
                "replay of {} answered {:?}",
                op.invocation.key,
                outcome.as_ref().map(label)
            )),
        }
    }
    mismatches
}

/// What the clients were told against the orders PostgreSQL has.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Stored {
    /// Orders beyond the first per key, orders without a key, and order ids acknowledged for two
    /// keys.
    pub(super) duplicates: usize,
    /// Keys with orders that the suite never sent.
    pub(super) unknown_orders: usize,
    /// Keys that definitely failed for their client (and were never acknowledged) with an order.
    pub(super) phantoms: usize,
    /// Acknowledged orders missing.
    pub(super) lost: usize,
    /// Acknowledged orders stored with another id, user or quantity.
    pub(super) mismatched: usize,
    /// Each phantom, duplicate acknowledgement, loss and mismatch.
    pub(super) examples: Vec<String>,
}

/// Compares the acknowledged orders and the failures with the stored `orders`.
pub(super) fn acknowledged_vs_stored(told: &Told<'_>, orders: &[OrderRow]) -> Stored {
    let mut s = Stored::default();
    let mut stored: HashMap<&str, Vec<&OrderRow>> = HashMap::new();
    for order in orders {
        match &order.key {
            Some(key) => stored.entry(key).or_default().push(order),
            None => s.duplicates += 1,
        }
    }
    for (key, rows) in &stored {
        s.duplicates += rows.len() - 1;
        if !told.sent.contains(key) {
            s.unknown_orders += 1;
        }
        if told.failed.contains(key) && !told.acked.contains_key(key) {
            s.phantoms += 1;
            s.examples.push(format!(
                "phantom: key {key} failed for the client but order {} exists",
                rows[0].id
            ));
        }
    }
    let mut keys_of_id: HashMap<i64, &str> = HashMap::new();
    for (key, (op, order)) in &told.acked {
        if let Some(other) = keys_of_id.insert(order.order_id, key) {
            s.duplicates += 1;
            s.examples.push(format!(
                "order {} acknowledged for keys {other} and {key}",
                order.order_id
            ));
        }
        match stored.get(key).map(Vec::as_slice) {
            None | Some([]) => {
                s.lost += 1;
                s.examples.push(format!(
                    "lost: key {key} acknowledged as order {} but not in orders",
                    order.order_id
                ));
            }
            Some([row, ..])
                if row.acknowledged_id() != order.order_id
                    || row.user != op.invocation.user
                    || row.quantity != i64::from(op.invocation.quantity) =>
            {
                s.mismatched += 1;
                s.examples.push(format!(
                    "mismatch: key {key} acknowledged as order {} but stored as {row:?}",
                    order.order_id
                ));
            }
            Some(_) => {}
        }
    }
    s
}

/// The sale's stock in units.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Stock {
    /// Units for sale.
    pub(super) total: i64,
    /// Units in orders.
    pub(super) sold: i64,
    /// Units left over all shards.
    pub(super) remaining: i64,
    /// `max(0, sold - total)`.
    pub(super) oversold: i64,
    /// Units in the acknowledged orders.
    pub(super) acknowledged_units: i64,
    /// `max(0, acknowledged_units - returned - total)`: units promised beyond the stock.
    pub(super) acknowledged_oversold: i64,
}

/// Units sold against the total, in PostgreSQL and as acknowledged to the clients (less the
/// units of cancelled and expired orders, which came back and may be sold again).
pub(super) fn stock(snapshot: &Snapshot, acknowledged_units: i64) -> Stock {
    let (total, sold) = (snapshot.total, snapshot.sold());
    let returned: i64 = snapshot.orders.iter().map(|o| o.quantity - o.held()).sum();
    Stock {
        total,
        sold,
        remaining: snapshot.shards.iter().map(|s| s.remaining).sum(),
        oversold: (sold - total).max(0),
        acknowledged_units,
        acknowledged_oversold: (acknowledged_units - returned - total).max(0),
    }
}

/// Each shard's stock against what was sold from it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ShardStock {
    /// Shards with `remaining < 0`.
    pub(super) negative_shards: usize,
    /// Shards whose `remaining + sold from it != initial`.
    pub(super) inconsistent_shards: usize,
    /// Units the shards still offer although they were already sold.
    pub(super) phantom_stock: i64,
    /// Each inconsistent shard.
    pub(super) examples: Vec<String>,
}

/// Checks that no shard is negative and that each one's `remaining` plus the units of its
/// `order_parts`, less the returned units folded back into it, equals its `initial` (a unit sold
/// twice breaks this long before the sale sells out, and so does a return lost or folded twice).
pub(super) fn shard_consistency(snapshot: &Snapshot) -> ShardStock {
    let mut s = ShardStock::default();
    let mut sold_by_shard: HashMap<i32, i64> = HashMap::new();
    for part in &snapshot.parts {
        *sold_by_shard.entry(part.shard).or_default() += part.quantity;
    }
    for folded in snapshot
        .returns
        .iter()
        .filter(|r| r.applied_fence.is_some())
    {
        *sold_by_shard.entry(folded.shard).or_default() -= folded.quantity;
    }
    for shard in &snapshot.shards {
        let sold = sold_by_shard.get(&shard.shard).copied().unwrap_or(0);
        if shard.remaining < 0 {
            s.negative_shards += 1;
        }
        if shard.remaining + sold != shard.initial {
            s.inconsistent_shards += 1;
            s.phantom_stock += (shard.remaining + sold - shard.initial).max(0);
            s.examples.push(format!(
                "shard {}: remaining {} + sold less folded returns {} = {} != initial {}",
                shard.shard,
                shard.remaining,
                sold,
                shard.remaining + sold,
                shard.initial
            ));
        }
    }
    s
}

/// Orders whose `order_parts` do not add up to their quantity.
pub(super) fn partial_orders(snapshot: &Snapshot) -> Counted {
    let mut partial = Counted::default();
    let mut parts_by_order: HashMap<i64, i64> = HashMap::new();
    for part in &snapshot.parts {
        *parts_by_order.entry(part.order_id).or_default() += part.quantity;
    }
    for order in &snapshot.orders {
        if parts_by_order.get(&order.id).copied().unwrap_or(0) != order.quantity {
            partial.add(format!(
                "partial: order {} of {} units has parts for {:?}",
                order.id,
                order.quantity,
                parts_by_order.get(&order.id)
            ));
        }
    }
    partial
}

/// Units bought per user, against `user_purchases` and the per-user limit.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Purchases {
    /// Users whose `user_purchases.bought` differs from their orders.
    pub(super) mismatches: usize,
    /// Users above the per-user limit.
    pub(super) over_limit: usize,
}

/// Checks that `user_purchases` matches the orders that hold their units (an ended order gave
/// its buyer's count back) and nobody is above the per-user limit.
pub(super) fn purchases_per_user(snapshot: &Snapshot) -> Purchases {
    let mut p = Purchases::default();
    let mut bought: HashMap<&str, i64> = HashMap::new();
    for order in &snapshot.orders {
        *bought.entry(&order.user).or_default() += order.held();
    }
    let purchases: HashMap<&str, i64> = snapshot
        .purchases
        .iter()
        .map(|(u, b)| (u.as_str(), *b))
        .collect();
    for (user, units) in &bought {
        if purchases.get(user).copied().unwrap_or(0) != *units {
            p.mismatches += 1;
        }
        if *units > snapshot.per_user_limit {
            p.over_limit += 1;
        }
    }
    p.mismatches += purchases
        .iter()
        .filter(|(u, b)| **b != 0 && !bought.contains_key(*u))
        .count();
    p
}

/// How the fences of successive commits on a shard follow each other.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct FenceSuccessions {
    /// Successive orders on a shard where the later one carries an older fence.
    pub(super) order_violations: usize,
    /// Successive orders on a shard under the same fence.
    pub(super) equal: usize,
    /// Each violation.
    pub(super) examples: Vec<String>,
}

/// Counts, over `parts` in order id order, older fences after newer ones and equal fences in a
/// row, per shard.
///
/// Commits on a shard are serialised by its row (order ids follow commit order), and none may
/// carry an older fence than one committed before it. An equal fence on consecutive commits is
/// one holder's run of writes, or (from two different grants) the counter handing the same token
/// out twice after Redis lost or rolled back its data: counted, not a violation by itself, as the
/// strict claim (`fence < t`) lets only the first twin in.
pub(super) fn fence_successions(parts: &[PartRow]) -> FenceSuccessions {
    let mut f = FenceSuccessions::default();
    let mut last: HashMap<i32, (i64, i64)> = HashMap::new();
    for part in parts {
        if let Some((order, fence)) = last.insert(part.shard, (part.order_id, part.fence)) {
            if fence > part.fence {
                f.order_violations += 1;
                f.examples.push(format!(
                    "shard {}: order {} (fence {}) after order {order} (fence {fence})",
                    part.shard, part.order_id, part.fence
                ));
            } else if fence == part.fence {
                f.equal += 1;
            }
        }
    }
    f
}

/// Order parts written after a newer owner had claimed their shard.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Takeovers {
    /// Parts written under fence F after a claim with a fence above F on the same shard.
    pub(super) count: usize,
    /// Each of them.
    pub(super) examples: Vec<String>,
}

/// The claims of every shard in time order, each with the largest fence claimed up to then.
struct ClaimHistory(HashMap<i32, Vec<(i64, i64)>>);

impl ClaimHistory {
    fn new(claims: &[ClaimRow]) -> Self {
        let mut by_shard: HashMap<i32, Vec<(i64, i64)>> = HashMap::new();
        let mut sorted: Vec<&ClaimRow> = claims.iter().collect();
        sorted.sort_by_key(|c| c.claimed_us);
        for claim in sorted {
            let history = by_shard.entry(claim.shard).or_default();
            let highest = history
                .last()
                .map_or(claim.fence, |&(_, f)| f.max(claim.fence));
            history.push((claim.claimed_us, highest));
        }
        Self(by_shard)
    }

    /// The last claim of `shard` before `time` as (claimed at, largest fence claimed so far).
    fn before(&self, shard: i32, time: i64) -> Option<(i64, i64)> {
        let history = self.0.get(&shard)?;
        let before = history.partition_point(|&(at, _)| at < time);
        before.checked_sub(1).map(|i| history[i])
    }
}

/// Real-time order of owners and writes, per shard, on PostgreSQL's clock: a part written under
/// fence F at time W is a violation when a claim with a larger fence was logged before W. The
/// claim takes the shard's row lock before it is logged, and an owned batch holds that lock until
/// it commits, so a fenced write can never land after a newer claim: this is what fencing
/// guarantees in time, not only in order. The unfenced control writes over the row without its
/// fence and is caught here. Parts without a write time (rows from before the column existed)
/// and unfenced parts (fence 0) are not judged.
pub(super) fn writes_after_takeover(parts: &[PartRow], claims: &[ClaimRow]) -> Takeovers {
    let history = ClaimHistory::new(claims);
    let mut t = Takeovers::default();
    for part in parts.iter().filter(|p| p.fence > 0) {
        let Some(written) = part.written_us else {
            continue;
        };
        if let Some((at, newer)) = history.before(part.shard, written)
            && newer > part.fence
        {
            t.count += 1;
            t.examples.push(format!(
                "shard {}: order {} written under fence {} {} µs after fence {newer} had claimed the shard",
                part.shard,
                part.order_id,
                part.fence,
                written - at
            ));
        }
    }
    t
}

/// Owned writes measured against their owner's own lease: the deadline the owner counted on when
/// it sent the batch (`lease_until`, its own clock) against when PostgreSQL decided (its clock;
/// both on one machine here).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct LateWrites {
    /// Parts and refusals that reached PostgreSQL after their lease had run out.
    pub(super) late: usize,
    /// ... of which the fence refused.
    pub(super) refused: usize,
    /// ... of which were written while their fence was still the newest claim of the shard: no
    /// other owner existed, so nothing could be sold twice.
    pub(super) unopposed: usize,
    /// ... of which were written after a newer fence had claimed the shard: the violation.
    pub(super) over_a_newer_owner: usize,
    /// Refusals of writes sent *within* their lease: the lock had already given the shard to
    /// someone else (Redis lost its data or failed over), and only the fence kept them apart.
    pub(super) refused_within_lease: usize,
    /// The violations.
    pub(super) examples: Vec<String>,
}

/// "No write lands after its own lease expired, unless the fence refused it": a late part is a
/// violation when a newer fence had claimed its shard before it was written; a late part whose
/// fence was still the newest claim had no rival and is counted, not judged. Refusals are sorted
/// into late ones (the paused or delayed owner) and ones within their lease (two holders at once,
/// where the lock alone failed). Rows without a lease deadline are not judged.
pub(super) fn late_writes(
    parts: &[PartRow],
    refusals: &[RefusalRow],
    claims: &[ClaimRow],
) -> LateWrites {
    let history = ClaimHistory::new(claims);
    let mut w = LateWrites::default();
    for refusal in refusals {
        match refusal.lease_until_us {
            Some(until) if refusal.refused_us > until => {
                w.late += 1;
                w.refused += 1;
            }
            Some(_) => w.refused_within_lease += 1,
            None => {}
        }
    }
    for part in parts {
        let (Some(written), Some(until)) = (part.written_us, part.lease_until_us) else {
            continue;
        };
        if written <= until {
            continue;
        }
        w.late += 1;
        match history.before(part.shard, written) {
            Some((at, newer)) if newer > part.fence => {
                w.over_a_newer_owner += 1;
                w.examples.push(format!(
                    "shard {}: order {} written under fence {} {} µs after its lease ran out and {} µs after fence {newer} had claimed the shard",
                    part.shard,
                    part.order_id,
                    part.fence,
                    written - until,
                    written - at
                ));
            }
            _ => w.unopposed += 1,
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::{super::fixtures::*, *};
    use crate::checker::{OrderState, ReturnRow};

    fn info(status: Option<u16>, reason: &str) -> Outcome {
        Outcome::Info {
            status,
            reason: reason.into(),
        }
    }

    fn resolved(op: usize, resolution: Resolution, server_errors: u32) -> Resolved {
        Resolved {
            op,
            resolution,
            attempts: 1,
            server_errors,
        }
    }

    fn ack(order_id: i64) -> OrderAck {
        OrderAck {
            order_id,
            shard: 0,
            fence: 1,
        }
    }

    #[test]
    fn status_counts_label_every_answer_and_add_the_resolutions_server_errors() {
        let (mut ops, _) = consistent_sale();
        ops.push(op(4, OpKind::Order, "k4", info(Some(503), "unavailable")));
        ops.push(op(5, OpKind::Order, "k5", info(Some(500), "internal")));
        let resolutions = [resolved(5, Resolution::PlacedNow(ack(3)), 2)];

        let counts = status_counts(&ops, &resolutions);

        assert_eq!(counts.by_label["201"], 2);
        assert_eq!(counts.by_label["409 user_limit_reached"], 1);
        assert_eq!(counts.by_label["200"], 1);
        assert_eq!(counts.by_label["503 unavailable"], 1);
        assert_eq!((counts.server_errors, counts.service_unavailable), (3, 1));
    }

    #[test]
    fn acknowledgements_take_the_resolutions_answers() {
        let (mut ops, _) = consistent_sale();
        for (id, key) in [(4, "k4"), (5, "k5"), (6, "k6"), (7, "k7")] {
            ops.push(op(id, OpKind::Order, key, info(None, "timeout")));
        }
        let resolutions = [
            resolved(4, Resolution::Happened(ack(3)), 0),
            resolved(5, Resolution::PlacedNow(ack(4)), 0),
            resolved(
                6,
                Resolution::NotHappened {
                    code: "409 sold_out".into(),
                },
                0,
            ),
            resolved(
                7,
                Resolution::Unknown {
                    last: "timeout".into(),
                },
                0,
            ),
        ];

        let told = acknowledgements(&ops, &resolutions);

        assert_eq!(
            told.acked.keys().copied().collect::<Vec<_>>(),
            ["k0", "k1", "k4", "k5"]
        );
        assert_eq!(told.acked["k4"].1.order_id, 3);
        assert!(told.failed.contains("k2") && told.failed.contains("k6"));
        assert!(!told.failed.contains("k7") && !told.acked.contains_key("k7"));
        assert_eq!(
            told.sent.len(),
            7,
            "k0..k2 and k4..k7, the replay's k0 once"
        );
        assert_eq!(
            (
                told.indeterminate,
                told.resolved_happened,
                told.resolved_placed_now,
                told.resolved_not_happened,
                told.unresolved
            ),
            (4, 1, 1, 1, 1)
        );
        assert_eq!(
            told.examples,
            ["unresolved: key k7 still unknown (timeout)"]
        );
        assert_eq!(told.acknowledged_units(), 4);
    }

    #[test]
    fn a_replay_answering_another_order_is_a_mismatch_and_a_silent_one_is_not() {
        let (mut ops, _) = consistent_sale();
        let told = acknowledgements(&ops, &[]);
        assert_eq!(replay_mismatches(&ops, &told.acked), Counted::default());

        ops.push(op(4, OpKind::Replay, "k1", ok(7, 2)));
        ops.push(op(5, OpKind::Replay, "k1", info(None, "timeout")));
        ops.push(op(
            6,
            OpKind::Replay,
            "k0",
            Outcome::Fail {
                status: 503,
                code: "busy".into(),
            },
        ));
        let told = acknowledgements(&ops, &[]);

        let mismatches = replay_mismatches(&ops, &told.acked);

        assert_eq!(mismatches.count, 1);
        assert_eq!(mismatches.examples, ["replay of k1 answered Some(\"201\")"]);
    }

    #[test]
    fn acknowledged_orders_are_matched_with_the_stored_ones() {
        let (ops, snapshot) = consistent_sale();
        let told = acknowledgements(&ops, &[]);
        assert_eq!(
            acknowledged_vs_stored(&told, &snapshot.orders),
            Stored::default()
        );

        let mut orders = snapshot.orders.clone();
        orders[0].quantity = 2; // k0 stored otherwise
        orders[1].key = Some("k2".into()); // k1 lost, failed k2 happened anyway
        orders.push(OrderRow {
            key: Some("k2".into()),
            ..orders[1].clone()
        }); // k2 twice
        orders.push(OrderRow {
            id: 9,
            key: Some("never-sent".into()),
            user: "u9".into(),
            quantity: 1,
            ..orders[0].clone()
        });
        orders.push(OrderRow {
            key: None,
            ..orders[3].clone()
        });

        let stored = acknowledged_vs_stored(&told, &orders);

        assert_eq!(
            (
                stored.lost,
                stored.mismatched,
                stored.phantoms,
                stored.unknown_orders,
                stored.duplicates
            ),
            (1, 1, 1, 1, 2)
        );
        assert_eq!(stored.examples.len(), 3, "{:?}", stored.examples);
    }

    #[test]
    fn one_order_id_acknowledged_for_two_keys_is_a_duplicate() {
        let (mut ops, snapshot) = consistent_sale();
        ops[1] = op(1, OpKind::Order, "k1", ok(1, 2));
        let told = acknowledgements(&ops, &[]);

        let stored = acknowledged_vs_stored(&told, &snapshot.orders);

        assert_eq!((stored.duplicates, stored.mismatched), (1, 1));
        assert_eq!(
            stored.examples[0],
            "order 1 acknowledged for keys k0 and k1"
        );
    }

    #[test]
    fn stock_measures_the_oversell_in_postgres_and_as_acknowledged() {
        let (_, mut snapshot) = consistent_sale();
        assert_eq!(
            stock(&snapshot, 2),
            Stock {
                total: 10,
                sold: 2,
                remaining: 8,
                oversold: 0,
                acknowledged_units: 2,
                acknowledged_oversold: 0,
            }
        );

        snapshot.total = 1;
        let s = stock(&snapshot, 4);

        assert_eq!((s.oversold, s.acknowledged_oversold), (1, 3));
    }

    #[test]
    fn a_shard_whose_stock_and_sales_disagree_is_inconsistent() {
        let (_, mut snapshot) = consistent_sale();
        assert_eq!(shard_consistency(&snapshot), ShardStock::default());

        snapshot.shards[0].remaining = 4; // a stale write put a sold unit back
        snapshot.shards[1].remaining = -1;
        let s = shard_consistency(&snapshot);

        assert_eq!(
            (s.negative_shards, s.inconsistent_shards, s.phantom_stock),
            (1, 2, 1)
        );
        assert_eq!(
            s.examples,
            [
                "shard 0: remaining 4 + sold less folded returns 2 = 6 != initial 5",
                "shard 1: remaining -1 + sold less folded returns 0 = -1 != initial 5"
            ]
        );
    }

    #[test]
    fn a_return_folded_once_balances_its_shard_and_one_lost_or_folded_twice_does_not() {
        let (_, mut snapshot) = consistent_sale();
        // Order 1 was cancelled and its unit folded back into shard 0 by its owner.
        snapshot.orders[0].state = OrderState::Cancelled;
        snapshot.returns.push(ReturnRow {
            order_id: 1,
            shard: 0,
            quantity: 1,
            applied_fence: Some(2),
        });
        snapshot.shards[0].remaining = 4;
        assert_eq!(shard_consistency(&snapshot), ShardStock::default());

        snapshot.shards[0].remaining = 3; // the owner's absolute write lost it
        assert_eq!(shard_consistency(&snapshot).inconsistent_shards, 1);
        snapshot.shards[0].remaining = 5; // folded twice
        assert_eq!(shard_consistency(&snapshot).phantom_stock, 1);
    }

    #[test]
    fn an_order_whose_parts_do_not_add_up_is_partial() {
        let (_, mut snapshot) = consistent_sale();
        assert_eq!(partial_orders(&snapshot), Counted::default());

        snapshot.parts.remove(1);
        let partial = partial_orders(&snapshot);

        assert_eq!(partial.count, 1);
        assert_eq!(
            partial.examples,
            ["partial: order 2 of 1 units has parts for None"]
        );
    }

    #[test]
    fn purchases_must_match_the_orders_and_stay_within_the_limit() {
        let (_, mut snapshot) = consistent_sale();
        assert_eq!(purchases_per_user(&snapshot), Purchases::default());

        snapshot.orders[1].user = "u0".into(); // u0 bought 2, u1 none
        snapshot.per_user_limit = 1;
        let p = purchases_per_user(&snapshot);

        // u0's row says 1 instead of 2, and u1 has a row for units it did not buy.
        assert_eq!((p.mismatches, p.over_limit), (2, 1));
    }

    #[test]
    fn fences_are_followed_per_shard() {
        let part = |order_id, shard, fence| PartRow {
            order_id,
            shard,
            quantity: 1,
            fence,
            written_us: None,
            lease_until_us: None,
        };
        let in_order = [part(1, 0, 1), part(2, 1, 5), part(3, 0, 2), part(4, 1, 5)];
        assert_eq!(
            fence_successions(&in_order),
            FenceSuccessions {
                equal: 1,
                ..FenceSuccessions::default()
            }
        );

        let out_of_order = [part(1, 0, 3), part(2, 1, 1), part(3, 0, 2), part(4, 0, 2)];
        let f = fence_successions(&out_of_order);

        assert_eq!((f.order_violations, f.equal), (1, 1));
        assert_eq!(
            f.examples,
            ["shard 0: order 3 (fence 2) after order 1 (fence 3)"]
        );
    }

    #[test]
    fn a_write_after_a_newer_claim_is_caught_in_real_time() {
        let part = |order_id, fence, written_us| PartRow {
            order_id,
            shard: 0,
            quantity: 1,
            fence,
            written_us: Some(written_us),
            lease_until_us: None,
        };
        let claim = |fence, claimed_us| ClaimRow {
            shard: 0,
            fence,
            claimed_us,
        };
        let claims = [claim(1, 100), claim(2, 500)];
        // Fence 1 writes before fence 2 claims; fence 2 writes after: in order.
        assert_eq!(
            writes_after_takeover(&[part(1, 1, 400), part(2, 2, 600)], &claims),
            Takeovers::default()
        );

        // The control: fence 1's delayed batch lands after fence 2 took the shard over.
        let late = writes_after_takeover(&[part(1, 1, 400), part(2, 1, 700)], &claims);

        assert_eq!(late.count, 1);
        assert_eq!(
            late.examples,
            ["shard 0: order 2 written under fence 1 200 µs after fence 2 had claimed the shard"]
        );
    }

    #[test]
    fn a_late_write_must_be_refused_once_a_newer_owner_claimed() {
        let part = |order_id, fence, written_us, lease_until_us| PartRow {
            order_id,
            shard: 0,
            quantity: 1,
            fence,
            written_us: Some(written_us),
            lease_until_us: Some(lease_until_us),
        };
        let refusal = |fence, refused_us, lease_until_us| RefusalRow {
            shard: 0,
            fence,
            lease_until_us: Some(lease_until_us),
            refused_us,
        };
        let claims = [
            ClaimRow {
                shard: 0,
                fence: 1,
                claimed_us: 100,
            },
            ClaimRow {
                shard: 0,
                fence: 2,
                claimed_us: 500,
            },
        ];
        // Fence 1 writes in its lease, then once late with no rival yet; its batch after fence
        // 2's claim is refused (late), and so is one sent within its lease (the lock failed).
        let fenced = late_writes(
            &[
                part(1, 1, 200, 300),
                part(2, 1, 400, 350),
                part(3, 2, 600, 900),
            ],
            &[refusal(1, 700, 450), refusal(1, 520, 600)],
            &claims,
        );
        assert_eq!(
            fenced,
            LateWrites {
                late: 2,
                refused: 1,
                unopposed: 1,
                refused_within_lease: 1,
                ..LateWrites::default()
            }
        );

        // The control: the same late batch accepted over fence 2.
        let unfenced = late_writes(&[part(1, 1, 200, 300), part(2, 1, 700, 450)], &[], &claims);

        assert_eq!((unfenced.late, unfenced.over_a_newer_owner), (1, 1));
        assert_eq!(
            unfenced.examples,
            [
                "shard 0: order 2 written under fence 1 250 µs after its lease ran out and 200 µs after fence 2 had claimed the shard"
            ]
        );
    }
}
