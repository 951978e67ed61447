//! Checking a scenario's outcome against its history, with PostgreSQL as the source of truth.
//!
//! 1. [`resolve`]: every operation whose outcome is unknown (info) is re-sent with its
//!    idempotency key and body once the faults have healed. `200` with the order: it had happened.
//!    `201`: it had not, and is placed now. `409`/`4xx`: it had not.
//! 2. [`Snapshot::load`]: the sale's rows, read directly from PostgreSQL.
//! 3. [`check`]: pure logic over history, resolutions and snapshot:
//!    - every acknowledged order exists exactly once, with the acknowledged id, user and quantity
//!      (`lost`, `mismatched`, `duplicates`);
//!    - no definitely failed operation happened anyway (`phantoms`);
//!    - `sold <= total`, each shard's `remaining >= 0`, each shard's `remaining` plus the units of
//!      its `order_parts` equals its `initial` (a unit sold twice breaks this long before the sale
//!      sells out), every order's parts add up to its quantity, `user_purchases` matches the
//!      orders, nobody is above the per-user limit;
//!    - for fenced sales: on every shard, no order carries an older fence than the one before it
//!      (equal fences, one token granted twice after Redis lost data, are counted);
//!    - replays of acknowledged keys answered the original order.

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::Result;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::{
    api::Api,
    history::{Op, OpKind, OrderAck, Outcome},
};

/// What re-sending an unknown operation's key showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Resolution {
    /// `200`: the original request had placed this order.
    Happened(OrderAck),
    /// `201`: it had not; this order was placed now.
    PlacedNow(OrderAck),
    /// A definite refusal: it had not happened (and did not now).
    NotHappened {
        /// The refusal (`409 sold_out`, ...).
        code: String,
    },
    /// Still unknown after every retry.
    Unknown {
        /// The last outcome.
        last: String,
    },
}

/// The resolution of one operation.
#[derive(Debug, Clone, Serialize)]
pub struct Resolved {
    /// The operation's id in the history.
    pub op: usize,
    /// What the re-send showed.
    pub resolution: Resolution,
    /// Requests it took.
    pub attempts: u32,
    /// 5xx other than 503 seen while resolving.
    pub server_errors: u32,
}

/// Re-sends attempts per unknown operation (spaced 300 ms apart).
const RESOLVE_ATTEMPTS: u32 = 8;

/// Resolves every order whose outcome is unknown by re-sending it through `api`.
pub async fn resolve(ops: &[Op], api: &Api, sku: &str) -> Vec<Resolved> {
    let unknown: Vec<Op> = ops
        .iter()
        .filter(|op| {
            op.invocation.kind == OpKind::Order
                && matches!(op.outcome, Some(Outcome::Info { .. }) | None)
        })
        .cloned()
        .collect();
    let mut resolved = Vec::with_capacity(unknown.len());
    let mut pending = unknown.into_iter().peekable();
    while pending.peek().is_some() {
        let mut tasks = JoinSet::new();
        for op in pending.by_ref().take(32) {
            let (api, sku) = (api.clone(), sku.to_owned());
            tasks.spawn(async move { resolve_one(&api, &sku, &op).await });
        }
        while let Some(done) = tasks.join_next().await {
            if let Ok(r) = done {
                resolved.push(r);
            }
        }
    }
    resolved.sort_by_key(|r| r.op);
    resolved
}

async fn resolve_one(api: &Api, sku: &str, op: &Op) -> Resolved {
    let mut server_errors = 0;
    let mut last = String::new();
    for attempt in 1..=RESOLVE_ATTEMPTS {
        let outcome = Outcome::classify(
            &api.order(
                sku,
                &op.invocation.user,
                op.invocation.quantity,
                &op.invocation.key,
            )
            .await,
        );
        server_errors += u32::from(outcome.is_server_error());
        let resolution = match outcome {
            Outcome::Ok { status: 200, order } => Some(Resolution::Happened(order)),
            Outcome::Ok { order, .. } => Some(Resolution::PlacedNow(order)),
            Outcome::Fail { status, code } if status != 0 && code != "busy" => {
                Some(Resolution::NotHappened {
                    code: format!("{status} {code}"),
                })
            }
            other => {
                last = label(&other);
                None
            }
        };
        if let Some(resolution) = resolution {
            return Resolved {
                op: op.id,
                resolution,
                attempts: attempt,
                server_errors,
            };
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    Resolved {
        op: op.id,
        resolution: Resolution::Unknown { last },
        attempts: RESOLVE_ATTEMPTS,
        server_errors,
    }
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

/// One shard row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRow {
    /// Index.
    pub shard: i32,
    /// Initial stock.
    pub initial: i64,
    /// Units left.
    pub remaining: i64,
    /// Highest fence accepted.
    pub fence: i64,
}

/// One order row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRow {
    /// Order id.
    pub id: i64,
    /// Its idempotency key.
    pub key: Option<String>,
    /// Buyer.
    pub user: String,
    /// Units.
    pub quantity: i64,
    /// `redis-gate` orders: the reference the client was given as its order id.
    pub gate_ref: Option<i64>,
}

impl OrderRow {
    /// The id a client was acknowledged: the `redis-gate` reference, else the row's id.
    pub fn acknowledged_id(&self) -> i64 {
        self.gate_ref.unwrap_or(self.id)
    }
}

/// One `order_parts` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRow {
    /// The order.
    pub order_id: i64,
    /// The shard the units came from.
    pub shard: i32,
    /// Units.
    pub quantity: i64,
    /// Fence it was written under (0 when unfenced).
    pub fence: i64,
}

/// A sale as PostgreSQL has it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Units for sale.
    pub total: i64,
    /// Per-user limit.
    pub per_user_limit: i64,
    /// Claims and writes refused by fences (stale holders stopped).
    pub fence_rejections: i64,
    /// Shards.
    pub shards: Vec<ShardRow>,
    /// Orders.
    pub orders: Vec<OrderRow>,
    /// Order parts.
    pub parts: Vec<PartRow>,
    /// `user_purchases`: units bought per user.
    pub purchases: Vec<(String, i64)>,
}

impl Snapshot {
    /// Reads sale `sku` (which must exist) in one repeatable-read transaction.
    pub async fn load(db: &mut tokio_postgres::Client, sku: &str) -> Result<Self> {
        let tx = db
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let sale = tx.query_one("SELECT total::bigint, per_user_limit::bigint, fence_rejections FROM sales WHERE sku = $1", &[&sku]).await?;
        let shards = tx
            .query("SELECT shard, initial::bigint, remaining::bigint, fence FROM shards WHERE sku = $1 ORDER BY shard", &[&sku])
            .await?
            .iter()
            .map(|r| ShardRow { shard: r.get(0), initial: r.get(1), remaining: r.get(2), fence: r.get(3) })
            .collect();
        let orders = tx
            .query("SELECT id, idempotency_key, user_id, quantity::bigint, gate_ref FROM orders WHERE sku = $1 ORDER BY id", &[&sku])
            .await?
            .iter()
            .map(|r| OrderRow { id: r.get(0), key: r.get(1), user: r.get(2), quantity: r.get(3), gate_ref: r.get(4) })
            .collect();
        let parts = tx
            .query("SELECT order_id, shard, quantity::bigint, fence FROM order_parts WHERE sku = $1 ORDER BY order_id, shard", &[&sku])
            .await?
            .iter()
            .map(|r| PartRow { order_id: r.get(0), shard: r.get(1), quantity: r.get(2), fence: r.get(3) })
            .collect();
        let purchases = tx
            .query(
                "SELECT user_id, bought::bigint FROM user_purchases WHERE sku = $1",
                &[&sku],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        tx.commit().await?;
        Ok(Self {
            total: sale.get(0),
            per_user_limit: sale.get(1),
            fence_rejections: sale.get(2),
            shards,
            orders,
            parts,
            purchases,
        })
    }

    /// Units in orders.
    pub fn sold(&self) -> i64 {
        self.orders.iter().map(|o| o.quantity).sum()
    }
}

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
    /// `sales.fence_rejections`: claims and writes refused by fences.
    pub stale_rejected: i64,
    /// A few examples of what went wrong, for the report.
    pub examples: Vec<String>,
}

impl Findings {
    fn example(&mut self, what: String) {
        if self.examples.len() < 12 {
            self.examples.push(what);
        }
    }
}

/// Checks the history (`ops`, with `resolutions`) against PostgreSQL's `snapshot`. `fenced`:
/// the sale's writes carry fences, so they must increase per shard.
pub fn check(ops: &[Op], resolutions: &[Resolved], snapshot: &Snapshot, fenced: bool) -> Findings {
    let mut f = Findings {
        requests: ops.len(),
        stale_rejected: snapshot.fence_rejections,
        ..Findings::default()
    };

    // What the clients were told, per key: the acknowledged order, or that it definitely failed.
    let mut acked: BTreeMap<&str, (&Op, OrderAck)> = BTreeMap::new();
    let mut failed: HashSet<&str> = HashSet::new();
    let mut sent: HashSet<&str> = HashSet::new();
    for op in ops {
        sent.insert(&op.invocation.key);
        let Some(outcome) = &op.outcome else { continue };
        *f.status_counts.entry(label(outcome)).or_default() += 1;
        f.server_errors += u64::from(outcome.is_server_error());
        f.service_unavailable += u64::from(outcome.status() == Some(503));
        match (op.invocation.kind, outcome) {
            (OpKind::Order, Outcome::Ok { order, .. }) => {
                acked.insert(&op.invocation.key, (op, *order));
            }
            (OpKind::Order, Outcome::Fail { .. }) => {
                failed.insert(&op.invocation.key);
            }
            (OpKind::Order, Outcome::Info { .. }) => f.indeterminate += 1,
            (OpKind::Replay, _) => {}
        }
    }
    for r in resolutions {
        f.server_errors += u64::from(r.server_errors);
        let op = &ops[r.op];
        match &r.resolution {
            Resolution::Happened(order) => {
                f.resolved_happened += 1;
                acked.insert(&op.invocation.key, (op, *order));
            }
            Resolution::PlacedNow(order) => {
                f.resolved_placed_now += 1;
                acked.insert(&op.invocation.key, (op, *order));
            }
            Resolution::NotHappened { .. } => {
                f.resolved_not_happened += 1;
                failed.insert(&op.invocation.key);
            }
            Resolution::Unknown { last } => {
                f.unresolved += 1;
                let example = format!(
                    "unresolved: key {} still unknown ({last})",
                    op.invocation.key
                );
                f.example(example);
            }
        }
    }
    f.acknowledged = acked.len();

    // Replays must answer the original order.
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
            (outcome, _) => {
                f.replay_mismatches += 1;
                let example = format!(
                    "replay of {} answered {:?}",
                    op.invocation.key,
                    outcome.as_ref().map(label)
                );
                f.example(example);
            }
        }
    }

    // Acknowledged orders against the database.
    let mut stored: HashMap<&str, Vec<&OrderRow>> = HashMap::new();
    for order in &snapshot.orders {
        match &order.key {
            Some(key) => stored.entry(key).or_default().push(order),
            None => f.duplicates += 1,
        }
    }
    for (key, rows) in &stored {
        f.duplicates += rows.len() - 1;
        if !sent.contains(key) {
            f.unknown_orders += 1;
        }
        if failed.contains(key) && !acked.contains_key(key) {
            f.phantoms += 1;
            f.example(format!(
                "phantom: key {key} failed for the client but order {} exists",
                rows[0].id
            ));
        }
    }
    let mut keys_of_id: HashMap<i64, &str> = HashMap::new();
    for (key, (op, order)) in &acked {
        if let Some(other) = keys_of_id.insert(order.order_id, key) {
            f.duplicates += 1;
            f.example(format!(
                "order {} acknowledged for keys {other} and {key}",
                order.order_id
            ));
        }
        match stored.get(key).map(Vec::as_slice) {
            None | Some([]) => {
                f.lost += 1;
                f.example(format!(
                    "lost: key {key} acknowledged as order {} but not in orders",
                    order.order_id
                ));
            }
            Some([row, ..])
                if row.acknowledged_id() != order.order_id
                    || row.user != op.invocation.user
                    || row.quantity != i64::from(op.invocation.quantity) =>
            {
                f.mismatched += 1;
                f.example(format!(
                    "mismatch: key {key} acknowledged as order {} but stored as {row:?}",
                    order.order_id
                ));
            }
            Some(_) => {}
        }
    }

    // Stock.
    f.total = snapshot.total;
    f.sold = snapshot.sold();
    f.remaining = snapshot.shards.iter().map(|s| s.remaining).sum();
    f.oversold = (f.sold - f.total).max(0);
    f.acknowledged_units = acked
        .values()
        .map(|(op, _)| i64::from(op.invocation.quantity))
        .sum();
    f.acknowledged_oversold = (f.acknowledged_units - f.total).max(0);
    let mut sold_by_shard: HashMap<i32, i64> = HashMap::new();
    let mut parts_by_order: HashMap<i64, i64> = HashMap::new();
    for part in &snapshot.parts {
        *sold_by_shard.entry(part.shard).or_default() += part.quantity;
        *parts_by_order.entry(part.order_id).or_default() += part.quantity;
    }
    for shard in &snapshot.shards {
        let sold = sold_by_shard.get(&shard.shard).copied().unwrap_or(0);
        if shard.remaining < 0 {
            f.negative_shards += 1;
        }
        if shard.remaining + sold != shard.initial {
            f.inconsistent_shards += 1;
            f.phantom_stock += (shard.remaining + sold - shard.initial).max(0);
            let example = format!(
                "shard {}: remaining {} + sold {} = {} != initial {}",
                shard.shard,
                shard.remaining,
                sold,
                shard.remaining + sold,
                shard.initial
            );
            f.example(example);
        }
    }
    let mut bought: HashMap<&str, i64> = HashMap::new();
    for order in &snapshot.orders {
        *bought.entry(&order.user).or_default() += order.quantity;
        if parts_by_order.get(&order.id).copied().unwrap_or(0) != order.quantity {
            f.partial_orders += 1;
            f.example(format!(
                "partial: order {} of {} units has parts for {:?}",
                order.id,
                order.quantity,
                parts_by_order.get(&order.id)
            ));
        }
    }
    let purchases: HashMap<&str, i64> = snapshot
        .purchases
        .iter()
        .map(|(u, b)| (u.as_str(), *b))
        .collect();
    for (user, units) in &bought {
        if purchases.get(user).copied().unwrap_or(0) != *units {
            f.purchase_mismatches += 1;
        }
        if *units > snapshot.per_user_limit {
            f.users_over_limit += 1;
        }
    }
    f.purchase_mismatches += purchases
        .iter()
        .filter(|(u, b)| **b != 0 && !bought.contains_key(*u))
        .count();

    // Fences: commits on a shard are serialised by its row (order ids follow commit order), and
    // none may carry an older fence than one committed before it. An equal fence on consecutive
    // commits is one holder's run of writes, or (from two different grants) the counter handing
    // the same token out twice after Redis lost or rolled back its data: counted, not a
    // violation by itself, as the strict claim (`fence < t`) lets only the first twin in.
    if fenced {
        let mut last: HashMap<i32, (i64, i64)> = HashMap::new();
        for part in &snapshot.parts {
            if let Some((order, fence)) = last.insert(part.shard, (part.order_id, part.fence)) {
                if fence > part.fence {
                    f.fence_order_violations += 1;
                    let example = format!(
                        "shard {}: order {} (fence {}) after order {order} (fence {fence})",
                        part.shard, part.order_id, part.fence
                    );
                    f.example(example);
                } else if fence == part.fence {
                    f.equal_fence_successions += 1;
                }
            }
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Invocation, OpKind};

    fn op(id: usize, kind: OpKind, key: &str, outcome: Outcome) -> Op {
        Op {
            id,
            invocation: Invocation {
                worker: 0,
                instance: 0,
                kind,
                key: key.into(),
                user: format!("u{id}"),
                quantity: 1,
            },
            invoked_ms: 0,
            completed_ms: Some(1),
            outcome: Some(outcome),
        }
    }

    fn ok(order_id: i64, fence: i64) -> Outcome {
        Outcome::Ok {
            status: 201,
            order: OrderAck {
                order_id,
                shard: 0,
                fence,
            },
        }
    }

    /// Two shards of 5; orders 1 and 2 on shard 0 under fences 1 and 2.
    fn consistent_sale() -> (Vec<Op>, Snapshot) {
        let ops = vec![
            op(0, OpKind::Order, "k0", ok(1, 1)),
            op(1, OpKind::Order, "k1", ok(2, 2)),
            op(
                2,
                OpKind::Order,
                "k2",
                Outcome::Fail {
                    status: 409,
                    code: "user_limit_reached".into(),
                },
            ),
            op(
                3,
                OpKind::Replay,
                "k0",
                Outcome::Ok {
                    status: 200,
                    order: OrderAck {
                        order_id: 1,
                        shard: 0,
                        fence: 1,
                    },
                },
            ),
        ];
        let snapshot = Snapshot {
            total: 10,
            per_user_limit: 2,
            fence_rejections: 0,
            shards: vec![
                ShardRow {
                    shard: 0,
                    initial: 5,
                    remaining: 3,
                    fence: 2,
                },
                ShardRow {
                    shard: 1,
                    initial: 5,
                    remaining: 5,
                    fence: 0,
                },
            ],
            orders: vec![
                OrderRow {
                    id: 1,
                    key: Some("k0".into()),
                    user: "u0".into(),
                    quantity: 1,
                    gate_ref: None,
                },
                OrderRow {
                    id: 2,
                    key: Some("k1".into()),
                    user: "u1".into(),
                    quantity: 1,
                    gate_ref: None,
                },
            ],
            parts: vec![
                PartRow {
                    order_id: 1,
                    shard: 0,
                    quantity: 1,
                    fence: 1,
                },
                PartRow {
                    order_id: 2,
                    shard: 0,
                    quantity: 1,
                    fence: 2,
                },
            ],
            purchases: vec![("u0".into(), 1), ("u1".into(), 1)],
        };
        (ops, snapshot)
    }

    #[test]
    fn a_consistent_history_passes_every_check() {
        let (ops, snapshot) = consistent_sale();
        let f = check(&ops, &[], &snapshot, true);
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
        let f = check(&ops, &resolved, &snapshot, true);
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
        });
        snapshot.parts.push(PartRow {
            order_id: 3,
            shard: 1,
            quantity: 1,
            fence: 1,
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
        let f = check(&ops, &resolved, &snapshot, true);
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
        let f = check(&ops, &[], &snapshot, false);
        assert_eq!(f.oversold, 1);
        assert_eq!(f.users_over_limit, 2);
    }
}
