//! A small consistent sale and its history, which the checker's tests break one way at a time.

use super::{ClaimRow, OrderRow, OrderState, PartRow, ShardRow, Snapshot};
use crate::history::{Invocation, Op, OpKind, OrderAck, Outcome};

/// An operation `id` by user `u{id}` of one unit, completed with `outcome`.
pub(super) fn op(id: usize, kind: OpKind, key: &str, outcome: Outcome) -> Op {
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

/// A new order `order_id` acknowledged under `fence`, on shard 0.
pub(super) fn ok(order_id: i64, fence: i64) -> Outcome {
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
pub(super) fn consistent_sale() -> (Vec<Op>, Snapshot) {
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
                state: OrderState::Paid,
                pay_by_us: None,
                settled_us: None,
            },
            OrderRow {
                id: 2,
                key: Some("k1".into()),
                user: "u1".into(),
                quantity: 1,
                gate_ref: None,
                state: OrderState::Paid,
                pay_by_us: None,
                settled_us: None,
            },
        ],
        parts: vec![
            PartRow {
                order_id: 1,
                shard: 0,
                quantity: 1,
                fence: 1,
                written_us: Some(1_000),
                lease_until_us: Some(1_500),
            },
            PartRow {
                order_id: 2,
                shard: 0,
                quantity: 1,
                fence: 2,
                written_us: Some(3_000),
                lease_until_us: Some(4_000),
            },
        ],
        claims: vec![
            ClaimRow {
                shard: 0,
                fence: 1,
                claimed_us: 500,
            },
            ClaimRow {
                shard: 0,
                fence: 2,
                claimed_us: 2_000,
            },
        ],
        refusals: Vec::new(),
        purchases: vec![("u0".into(), 1), ("u1".into(), 1)],
        returns: Vec::new(),
    };
    (ops, snapshot)
}
