//! Checking a scenario's outcome against its history, with PostgreSQL as the source of truth.
//!
//! 1. [`resolve`]: every operation whose outcome is unknown (info) is re-sent with its
//!    idempotency key and body once the faults have healed. `200` with the order: it had happened.
//!    `201`: it had not, and is placed now. `409`/`4xx`: it had not.
//! 2. [`Snapshot::load`]: the sale's rows, read directly from PostgreSQL.
//! 3. [`check`]: pure logic over history, resolutions and snapshot, composed of one small check
//!    per concern:
//!    - every acknowledged order exists exactly once, with the acknowledged id, user and quantity
//!      (`lost`, `mismatched`, `duplicates`);
//!    - no definitely failed operation happened anyway (`phantoms`);
//!    - `sold <= total`, each shard's `remaining >= 0`, each shard's `remaining` plus the units of
//!      its `order_parts` equals its `initial` (a unit sold twice breaks this long before the sale
//!      sells out), every order's parts add up to its quantity, `user_purchases` matches the
//!      orders, nobody is above the per-user limit;
//!    - for fenced sales: on every shard, no order carries an older fence than the one before it
//!      (equal fences, one token granted twice after Redis lost data, are counted);
//!    - for owned sales, in real time: no order written under a fence after a newer fence had
//!      claimed its shard, and no write that landed after its owner's own lease ran out accepted
//!      over a newer owner (late writes are counted by fate: refused, unopposed, over a newer
//!      owner; refusals sent within their lease show where the lock alone failed);
//!    - replays of acknowledged keys answered the original order.
//!
//! # Layout
//!
//! | file | what lives there |
//! |---|---|
//! | `resolve.rs` | [`resolve`]: re-sending the unknown operations through an instance |
//! | `snapshot.rs` | [`Snapshot`] and its rows: the sale as PostgreSQL has it |
//! | `checks.rs` | the checks, each a pure function with its own counts and examples |
//! | `settlements.rs` | the lifecycle's checks: payments and cancellations kept, returns exactly once |
//! | `mod.rs` | [`Findings`] and [`check`], which composes the checks into them |

mod checks;
#[cfg(test)]
mod fixtures;
mod resolve;
mod settlements;
mod snapshot;

use std::collections::BTreeMap;

use serde::Serialize;

pub use resolve::{Resolution, Resolved, resolve};
pub use settlements::Settlements;
pub use snapshot::{
    ClaimRow, OrderRow, OrderState, PartRow, RefusalRow, ReturnRow, ShardRow, Snapshot,
};

use crate::{
    history::{Op, Outcome},
    settlement::SettleOp,
};

/// Examples of what went wrong kept in the findings (the first ones, in the order of the checks).
const MAX_EXAMPLES: usize = 12;

/// Everything the checker found. Lists hold a few examples each (keys or descriptions).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Findings {
    /// Load operations (orders and replays).
    pub requests: usize,
    /// Outcomes of the load operations by label (`201`, `409 sold_out`, `timeout`, ...).
    pub status_counts: BTreeMap<String, u64>,
    /// Distinct orders acknowledged to a client (during the load or while resolving).
    pub acknowledged: usize,
    /// Units in those orders: what the clients were told they bought.
    pub acknowledged_units: i64,
    /// `max(0, acknowledged_units - total)`: units promised beyond the stock (an oversell the
    /// clients see even when PostgreSQL's orders stay within it, e.g. acknowledged orders lost).
    pub acknowledged_oversold: i64,
    /// Acknowledged orders missing from PostgreSQL.
    pub lost: usize,
    /// Acknowledged orders stored with another id, user or quantity.
    pub mismatched: usize,
    /// Orders beyond the first per key, orders without a key, and order ids acknowledged for two
    /// keys.
    pub duplicates: usize,
    /// Definitely failed operations that PostgreSQL has an order for anyway.
    pub phantoms: usize,
    /// Orders under keys the suite never sent.
    pub unknown_orders: usize,
    /// Replays that did not answer 200 with the original order (and were not unknown).
    pub replay_mismatches: usize,
    /// Operations whose outcome was unknown (info).
    pub indeterminate: usize,
    /// ... of which had happened (200 on re-send).
    pub resolved_happened: usize,
    /// ... of which had not (a refusal on re-send).
    pub resolved_not_happened: usize,
    /// ... of which had not, and were placed by the re-send (201).
    pub resolved_placed_now: usize,
    /// ... still unknown after every retry.
    pub unresolved: usize,
    /// 5xx other than 503, during the load and while resolving.
    pub server_errors: u64,
    /// 503 answers (documented `busy` / `unavailable`).
    pub service_unavailable: u64,
    /// Units for sale.
    pub total: i64,
    /// Units in orders.
    pub sold: i64,
    /// Units left over all shards.
    pub remaining: i64,
    /// `max(0, sold - total)`.
    pub oversold: i64,
    /// Shards with `remaining < 0`.
    pub negative_shards: usize,
    /// Shards whose `remaining + sold from it != initial`.
    pub inconsistent_shards: usize,
    /// Units the shards still offer although they were already sold (stale writes put them
    /// back): the oversell still to come if the sale runs to sold out.
    pub phantom_stock: i64,
    /// Orders whose parts do not add up to their quantity.
    pub partial_orders: usize,
    /// Users whose `user_purchases.bought` differs from their orders.
    pub purchase_mismatches: usize,
    /// Users above the per-user limit.
    pub users_over_limit: usize,
    /// Successive orders on a shard where the later one carries an older fence (fenced sales).
    pub fence_order_violations: usize,
    /// Successive orders on a shard under the same fence: one token granted twice.
    pub equal_fence_successions: usize,
    /// Order parts written under a fence after a newer fence had claimed their shard (owned
    /// strategies): a deposed owner's write landing late, in real time.
    pub writes_after_takeover: usize,
    /// Owned writes that reached PostgreSQL after their owner's own lease had run out (parts
    /// written and batches refused; `lease_until` against PostgreSQL's decision time).
    pub late_writes: usize,
    /// ... of which the fence refused.
    pub late_writes_refused: usize,
    /// ... of which were written while their fence was still the shard's newest claim (no rival).
    pub late_writes_unopposed: usize,
    /// ... of which were written after a newer fence had claimed the shard: the violation.
    pub late_writes_over_a_newer_owner: usize,
    /// Batches refused although sent within their lease: the lock had given the shard to a second
    /// holder, and the fence alone kept them apart.
    pub refused_within_lease: usize,
    /// `seckill_fence_rejections(sku)`: claims, writes and batches refused by fences.
    pub stale_rejected: i64,
    /// The lifecycle: payments and cancellations against the orders' final states, and the
    /// returns of the ended orders.
    pub lifecycle: Settlements,
    /// A few examples of what went wrong, for the report.
    pub examples: Vec<String>,
}

/// A short label of an outcome, for status counts: `201`, `409 sold_out`, `timeout`, ...
pub fn label(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Ok { status, .. } => status.to_string(),
        Outcome::Fail { status: 0, code } => code.clone(),
        Outcome::Fail { status, code } if code.is_empty() => status.to_string(),
        Outcome::Fail { status, code } => format!("{status} {code}"),
        Outcome::Info {
            status: Some(status),
            reason,
        } => format!("{status} {reason}"),
        Outcome::Info {
            status: None,
            reason,
        } => reason.clone(),
    }
}

/// Checks the history (`ops`, with `resolutions`, and the payments and cancellations in
/// `settles`) against PostgreSQL's `snapshot`. `fenced`: the sale's writes carry fences, so their
/// successions per shard are counted.
pub fn check(
    ops: &[Op],
    resolutions: &[Resolved],
    settles: &[SettleOp],
    snapshot: &Snapshot,
    fenced: bool,
) -> Findings {
    let statuses = checks::status_counts(ops, resolutions);
    let told = checks::acknowledgements(ops, resolutions);
    let replays = checks::replay_mismatches(ops, &told.acked);
    let stored = checks::acknowledged_vs_stored(&told, &snapshot.orders);
    let stock = checks::stock(snapshot, told.acknowledged_units());
    let shards = checks::shard_consistency(snapshot);
    let partial = checks::partial_orders(snapshot);
    let purchases = checks::purchases_per_user(snapshot);
    let fences = if fenced {
        checks::fence_successions(&snapshot.parts)
    } else {
        checks::FenceSuccessions::default()
    };
    let takeovers = checks::writes_after_takeover(&snapshot.parts, &snapshot.claims);
    let late = checks::late_writes(&snapshot.parts, &snapshot.refusals, &snapshot.claims);
    let lifecycle = settlements::settlements(settles, snapshot);
    let examples = [
        told.examples,
        replays.examples,
        stored.examples,
        shards.examples,
        partial.examples,
        fences.examples,
        takeovers.examples,
        late.examples,
        lifecycle.examples.clone(),
    ]
    .into_iter()
    .flatten()
    .take(MAX_EXAMPLES)
    .collect();
    Findings {
        requests: ops.len(),
        status_counts: statuses.by_label,
        acknowledged: told.acked.len(),
        acknowledged_units: stock.acknowledged_units,
        acknowledged_oversold: stock.acknowledged_oversold,
        lost: stored.lost,
        mismatched: stored.mismatched,
        duplicates: stored.duplicates,
        phantoms: stored.phantoms,
        unknown_orders: stored.unknown_orders,
        replay_mismatches: replays.count,
        indeterminate: told.indeterminate,
        resolved_happened: told.resolved_happened,
        resolved_not_happened: told.resolved_not_happened,
        resolved_placed_now: told.resolved_placed_now,
        unresolved: told.unresolved,
        server_errors: statuses.server_errors + lifecycle.server_errors,
        service_unavailable: statuses.service_unavailable,
        total: stock.total,
        sold: stock.sold,
        remaining: stock.remaining,
        oversold: stock.oversold,
        negative_shards: shards.negative_shards,
        inconsistent_shards: shards.inconsistent_shards,
        phantom_stock: shards.phantom_stock,
        partial_orders: partial.count,
        purchase_mismatches: purchases.mismatches,
        users_over_limit: purchases.over_limit,
        fence_order_violations: fences.order_violations,
        equal_fence_successions: fences.equal,
        writes_after_takeover: takeovers.count,
        late_writes: late.late,
        late_writes_refused: late.refused,
        late_writes_unopposed: late.unopposed,
        late_writes_over_a_newer_owner: late.over_a_newer_owner,
        refused_within_lease: late.refused_within_lease,
        stale_rejected: snapshot.fence_rejections,
        lifecycle,
        examples,
    }
}

#[cfg(test)]
mod tests {
    use super::{fixtures::*, *};
    use crate::history::{OpKind, OrderAck};

    #[test]
    fn a_consistent_history_passes_every_check() {
        let (ops, snapshot) = consistent_sale();
        let f = check(&ops, &[], &[], &snapshot, true);
        assert_eq!(
            (f.acknowledged, f.lost, f.duplicates, f.phantoms, f.oversold),
            (2, 0, 0, 0, 0)
        );
        assert_eq!(
            (
                f.inconsistent_shards,
                f.partial_orders,
                f.purchase_mismatches,
                f.replay_mismatches
            ),
            (0, 0, 0, 0)
        );
        assert_eq!(f.fence_order_violations, 0);
        assert!(f.examples.is_empty(), "{:?}", f.examples);
    }

    #[test]
    fn lost_phantom_and_stale_writes_are_found() {
        let (mut ops, mut snapshot) = consistent_sale();
        // The database lost order 2, and has one for the failed key k2.
        snapshot.orders[1].key = Some("k2".into());
        // A stale write put a unit back on shard 0, under an older fence.
        snapshot.shards[0].remaining = 4;
        snapshot.parts[0].fence = 3;
        ops.push(op(
            4,
            OpKind::Order,
            "k4",
            Outcome::Info {
                status: None,
                reason: "timeout".into(),
            },
        ));
        let resolved = [Resolved {
            op: 4,
            resolution: Resolution::Unknown {
                last: "timeout".into(),
            },
            attempts: 8,
            server_errors: 0,
        }];
        let f = check(&ops, &resolved, &[], &snapshot, true);
        assert_eq!(f.lost, 1);
        assert_eq!(f.phantoms, 1);
        assert_eq!(f.inconsistent_shards, 1);
        assert_eq!(f.fence_order_violations, 1);
        assert_eq!((f.indeterminate, f.unresolved), (1, 1));
    }

    #[test]
    fn resolutions_count_as_acknowledged_or_failed() {
        let (mut ops, mut snapshot) = consistent_sale();
        ops.push(op(
            4,
            OpKind::Order,
            "k4",
            Outcome::Info {
                status: Some(503),
                reason: "unavailable".into(),
            },
        ));
        ops.push(op(
            5,
            OpKind::Order,
            "k5",
            Outcome::Info {
                status: None,
                reason: "timeout".into(),
            },
        ));
        snapshot.orders.push(OrderRow {
            id: 3,
            key: Some("k4".into()),
            user: "u4".into(),
            quantity: 1,
            gate_ref: None,
            state: OrderState::Paid,
            pay_by_us: None,
            settled_us: None,
        });
        snapshot.parts.push(PartRow {
            order_id: 3,
            shard: 1,
            quantity: 1,
            fence: 1,
            written_us: None,
            lease_until_us: None,
        });
        snapshot.shards[1].remaining = 4;
        snapshot.purchases.push(("u4".into(), 1));
        let resolved = [
            Resolved {
                op: 4,
                resolution: Resolution::Happened(OrderAck {
                    order_id: 3,
                    shard: 1,
                    fence: 1,
                }),
                attempts: 1,
                server_errors: 0,
            },
            Resolved {
                op: 5,
                resolution: Resolution::NotHappened {
                    code: "409 sold_out".into(),
                },
                attempts: 1,
                server_errors: 0,
            },
        ];
        let f = check(&ops, &resolved, &[], &snapshot, true);
        assert_eq!(
            (
                f.acknowledged,
                f.resolved_happened,
                f.resolved_not_happened,
                f.lost,
                f.phantoms
            ),
            (3, 1, 1, 0, 0)
        );
        assert_eq!(f.service_unavailable, 1);
    }

    #[test]
    fn oversell_and_limits_are_measured() {
        let (ops, mut snapshot) = consistent_sale();
        snapshot.total = 1;
        snapshot.per_user_limit = 0;
        let f = check(&ops, &[], &[], &snapshot, false);
        assert_eq!(f.oversold, 1);
        assert_eq!(f.users_over_limit, 2);
    }
}
