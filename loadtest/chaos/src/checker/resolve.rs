//! Resolving the operations whose outcome is unknown (info): each is re-sent with its idempotency
//! key and body through a healthy instance once the faults have healed. `200` with the order: it
//! had happened. `201`: it had not, and is placed now. `409`/`4xx`: it had not. Anything else,
//! again after a pause, up to [`RESOLVE_ATTEMPTS`] times.

use serde::Serialize;
use tokio::task::JoinSet;

use super::label;
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
