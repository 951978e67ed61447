//! The lifecycle's checks, for sales whose orders are paid, cancelled or expired during the run:
//!
//! - a payment or cancellation answered `200` is the order's final state, and one refused
//!   (`409 order_closed`) is not (payment against expiry: exactly one wins, and the answer says
//!   which);
//! - every cancelled or expired order gave each of its parts back exactly once (one
//!   `stock_returns` row per part, with its units), and no order that holds its units has a
//!   return;
//! - no order expired before its window closed.
//!
//! Whether the returns reached the stock exactly once is the shard check's (`checks.rs`): each
//! shard's `remaining` plus its sold units, less the returns folded into it, is its `initial`.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::{OrderRow, OrderState, Snapshot};
use crate::settlement::{SettleOp, SettleOutcome};

/// What the lifecycle's checks found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Settlements {
    /// Payments and cancellations sent.
    pub sent: usize,
    /// Their outcomes: `paid`, `cancelled`, `refused`, `timeout`, ...
    pub outcomes: BTreeMap<String, u64>,
    /// Answered done, yet the order ended otherwise (or the answer named another state).
    pub not_kept: usize,
    /// Refused as closed, yet the order is in the state the call asked for.
    pub refused_but_done: usize,
    /// Refused with a status other than `409 order_closed` (e.g. `404` for the suite's own order).
    pub rejected: usize,
    /// 5xx other than 503.
    pub server_errors: u64,
    /// Orders whose returns do not match how they ended: an ended order whose parts did not all
    /// come back once, or an order holding its units that has a return.
    pub returns_mismatched: usize,
    /// Orders expired before their window closed.
    pub expired_early: usize,
    /// Units of the sale's orders by state.
    pub units_by_state: BTreeMap<&'static str, i64>,
    /// Returned units still waiting for their shard's owner or next claim.
    pub returns_pending: i64,
    /// Returned units folded into the stock.
    pub returns_folded: i64,
    /// A few examples (also in the findings' examples).
    #[serde(skip)]
    pub examples: Vec<String>,
}

impl Settlements {
    fn example(&mut self, what: String) {
        if self.examples.len() < 4 {
            self.examples.push(what);
        }
    }
}

/// Checks the payments and cancellations in `settles`, and every order's returns, against
/// `snapshot`.
pub(super) fn settlements(settles: &[SettleOp], snapshot: &Snapshot) -> Settlements {
    let mut s = Settlements {
        sent: settles.len(),
        ..Settlements::default()
    };
    let orders: HashMap<i64, &OrderRow> = snapshot.orders.iter().map(|o| (o.id, o)).collect();
    for op in settles {
        let Some(outcome) = &op.outcome else { continue };
        let label = match outcome {
            SettleOutcome::Done { state } => state.clone(),
            SettleOutcome::Refused => "refused".to_owned(),
            SettleOutcome::Rejected { status, code } => format!("{status} {code}"),
            SettleOutcome::Unknown { reason, .. } => reason.clone(),
        };
        *s.outcomes.entry(label).or_default() += 1;
        let target = op.action.target();
        let stored = orders.get(&op.order_id).map(|o| o.state.as_str());
        match outcome {
            SettleOutcome::Done { state } if state != target || stored != Some(target) => {
                s.not_kept += 1;
                s.example(format!(
                    "order {}: {} answered {state}, stored {stored:?}",
                    op.order_id,
                    op.action.path()
                ));
            }
            SettleOutcome::Refused if stored == Some(target) => {
                s.refused_but_done += 1;
                s.example(format!(
                    "order {}: {} refused as closed, stored {target}",
                    op.order_id,
                    op.action.path()
                ));
            }
            SettleOutcome::Rejected { status, code } => {
                s.rejected += 1;
                s.example(format!(
                    "order {}: {} answered {status} {code}",
                    op.order_id,
                    op.action.path()
                ));
            }
            other if other.is_server_error() => s.server_errors += 1,
            _ => {}
        }
    }
    s.check_returns(snapshot);
    s
}

impl Settlements {
    fn check_returns(&mut self, snapshot: &Snapshot) {
        let mut parts: HashMap<i64, Vec<(i32, i64)>> = HashMap::new();
        for part in &snapshot.parts {
            parts
                .entry(part.order_id)
                .or_default()
                .push((part.shard, part.quantity));
        }
        let mut returns: HashMap<i64, Vec<(i32, i64)>> = HashMap::new();
        for r in &snapshot.returns {
            returns
                .entry(r.order_id)
                .or_default()
                .push((r.shard, r.quantity));
            if r.applied_fence.is_some() {
                self.returns_folded += r.quantity;
            } else {
                self.returns_pending += r.quantity;
            }
        }
        for order in &snapshot.orders {
            *self.units_by_state.entry(order.state.as_str()).or_default() += order.quantity;
            let mut expected = if order.state.holds_stock() {
                Vec::new()
            } else {
                parts.get(&order.id).cloned().unwrap_or_default()
            };
            let mut found = returns.remove(&order.id).unwrap_or_default();
            expected.sort_unstable();
            found.sort_unstable();
            if expected != found {
                self.returns_mismatched += 1;
                self.example(format!(
                    "order {} ({}): parts {expected:?} returned as {found:?}",
                    order.id,
                    order.state.as_str()
                ));
            }
            if order.state == OrderState::Expired
                && let (Some(pay_by), Some(settled)) = (order.pay_by_us, order.settled_us)
                && settled < pay_by
            {
                self.expired_early += 1;
                self.example(format!(
                    "order {} expired {} µs before its window closed",
                    order.id,
                    pay_by - settled
                ));
            }
        }
        // Returns of orders the sale does not have.
        for (order, found) in returns {
            self.returns_mismatched += 1;
            self.example(format!("return {found:?} of an unknown order {order}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        checker::{PartRow, ReturnRow},
        settlement::SettleAction,
    };

    fn order(id: i64, state: OrderState) -> OrderRow {
        OrderRow {
            id,
            key: Some(format!("k{id}")),
            user: format!("u{id}"),
            quantity: 1,
            gate_ref: None,
            state,
            pay_by_us: Some(10_000),
            settled_us: Some(9_000),
        }
    }

    fn part(order_id: i64) -> PartRow {
        PartRow {
            order_id,
            shard: 0,
            quantity: 1,
            fence: 1,
            written_us: None,
            lease_until_us: None,
        }
    }

    fn returned(order_id: i64, applied: bool) -> ReturnRow {
        ReturnRow {
            order_id,
            shard: 0,
            quantity: 1,
            applied_fence: applied.then_some(1),
        }
    }

    fn settle(order_id: i64, action: SettleAction, outcome: SettleOutcome) -> SettleOp {
        SettleOp {
            order_id,
            action,
            instance: 0,
            invoked_ms: 0,
            completed_ms: Some(1),
            outcome: Some(outcome),
        }
    }

    /// Order 1 paid, 2 cancelled (return folded), 3 reserved.
    fn sale() -> (Vec<SettleOp>, Snapshot) {
        let snapshot = Snapshot {
            orders: vec![
                order(1, OrderState::Paid),
                order(2, OrderState::Cancelled),
                order(3, OrderState::Reserved),
            ],
            parts: vec![part(1), part(2), part(3)],
            returns: vec![returned(2, true)],
            ..Snapshot::default()
        };
        let settles = vec![
            settle(
                1,
                SettleAction::Pay,
                SettleOutcome::Done {
                    state: "paid".into(),
                },
            ),
            settle(
                2,
                SettleAction::Cancel,
                SettleOutcome::Done {
                    state: "cancelled".into(),
                },
            ),
            settle(3, SettleAction::Pay, SettleOutcome::Refused),
        ];
        (settles, snapshot)
    }

    #[test]
    fn kept_answers_and_exact_returns_pass() {
        let (settles, snapshot) = sale();
        let s = settlements(&settles, &snapshot);
        assert_eq!(
            (
                s.not_kept,
                s.refused_but_done,
                s.returns_mismatched,
                s.expired_early
            ),
            (0, 0, 0, 0),
            "{:?}",
            s.examples
        );
        assert_eq!((s.returns_folded, s.returns_pending), (1, 0));
        assert_eq!(s.units_by_state.get("paid"), Some(&1));
    }

    #[test]
    fn a_paid_order_expired_a_missing_return_and_an_early_expiry_are_found() {
        let (settles, mut snapshot) = sale();
        // The payment was answered, then the order expired early and its return went missing.
        snapshot.orders[0].state = OrderState::Expired;
        snapshot.orders[0].settled_us = Some(9_000);
        // A reserved order with a return: its unit comes back while it still holds it.
        snapshot.returns.push(returned(3, false));
        let s = settlements(&settles, &snapshot);
        assert_eq!(s.not_kept, 1);
        assert_eq!(s.expired_early, 1);
        assert_eq!(s.returns_mismatched, 2, "{:?}", s.examples);
    }

    #[test]
    fn a_refusal_of_what_happened_anyway_is_found() {
        let (mut settles, snapshot) = sale();
        settles[2].action = SettleAction::Cancel;
        settles[2].order_id = 2;
        let s = settlements(&settles, &snapshot);
        assert_eq!(s.refused_but_done, 1);
    }
}
