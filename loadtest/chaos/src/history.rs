//! The Jepsen-style history of a scenario: every client operation is recorded when it is invoked
//! and again when it completes, as
//!
//! - **ok**: the service acknowledged an order (201 new, 200 replay), with the order it returned;
//! - **fail**: it definitely did not happen (409 sold out / user limit, 4xx, 503 `busy`, or the
//!   connection could not even be made);
//! - **info**: unknown whether it happened (timeout, broken connection, 503 `unavailable`, 500).
//!   The checker resolves these afterwards by re-sending their idempotency key.
//!
//! Times are milliseconds since the scenario's [`Clock`] started.

use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use serde::Serialize;
use serde_json::Value;

use crate::{
    api::{Reply, TransportError},
    settlement::{SettleAction, SettleOp, SettleOutcome},
};

/// Milliseconds since a scenario started.
#[derive(Debug, Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    /// Starts counting now.
    pub fn start() -> Self {
        Self(Instant::now())
    }

    /// Milliseconds since the start.
    pub fn now_ms(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }
}

/// What an operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// A new order under a fresh idempotency key.
    Order,
    /// A replay of an acknowledged order's key and body: must answer that same order.
    Replay,
}

/// The order the service returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OrderAck {
    /// `order_id`.
    pub order_id: i64,
    /// The (first) shard it was taken from.
    pub shard: i64,
    /// The fence it was written under.
    pub fence: i64,
}

/// How an operation completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Outcome {
    /// Acknowledged.
    Ok {
        /// 201 (new) or 200 (replay).
        status: u16,
        /// The order.
        order: OrderAck,
    },
    /// Definitely not done.
    Fail {
        /// HTTP status (0: never sent).
        status: u16,
        /// The error code (`sold_out`, `busy`, `connect`, ...).
        code: String,
    },
    /// Unknown whether it was done.
    Info {
        /// HTTP status, if there was an answer.
        status: Option<u16>,
        /// Why it is unknown (`timeout`, `broken`, `unavailable`, `internal`, ...).
        reason: String,
    },
}

impl Outcome {
    /// Classifies a reply to an order request.
    pub fn classify(reply: &Reply) -> Self {
        match reply {
            Reply::Transport(TransportError::Connect) => Self::Fail {
                status: 0,
                code: "connect".into(),
            },
            Reply::Transport(TransportError::Timeout) => Self::Info {
                status: None,
                reason: "timeout".into(),
            },
            Reply::Transport(TransportError::Broken) => Self::Info {
                status: None,
                reason: "broken".into(),
            },
            Reply::Http { status, body } => {
                let status = *status;
                let code = body
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                match status {
                    200 | 201 => match order_of(body) {
                        Some(order) => Self::Ok { status, order },
                        None => Self::Info {
                            status: Some(status),
                            reason: "unparseable".into(),
                        },
                    },
                    // Busy: the deadline passed before anything was committed.
                    503 if code == "busy" => Self::Fail { status, code },
                    // Unavailable: a dependency failed, possibly after the commit.
                    503 => Self::Info {
                        status: Some(status),
                        reason: if code.is_empty() { "503".into() } else { code },
                    },
                    400..=499 => Self::Fail { status, code },
                    _ => Self::Info {
                        status: Some(status),
                        reason: if code.is_empty() {
                            status.to_string()
                        } else {
                            code
                        },
                    },
                }
            }
        }
    }

    /// The HTTP status, if there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Ok { status, .. } => Some(*status),
            Self::Fail { status: 0, .. } => None,
            Self::Fail { status, .. } => Some(*status),
            Self::Info { status, .. } => *status,
        }
    }

    /// A server error: any 5xx except the documented 503 (`busy` / `unavailable`).
    pub fn is_server_error(&self) -> bool {
        self.status().is_some_and(|s| s >= 500 && s != 503)
    }
}

fn order_of(body: &Value) -> Option<OrderAck> {
    Some(OrderAck {
        order_id: body.get("order_id")?.as_i64()?,
        shard: body.get("shard")?.as_i64()?,
        fence: body.get("fence")?.as_i64()?,
    })
}

/// One recorded operation.
#[derive(Debug, Clone, Serialize)]
pub struct Op {
    /// Position in the history.
    pub id: usize,
    /// What was sent, by whom, where.
    #[serde(flatten)]
    pub invocation: Invocation,
    /// When it was sent.
    pub invoked_ms: u64,
    /// When it completed (`None` while in flight).
    pub completed_ms: Option<u64>,
    /// How it completed.
    pub outcome: Option<Outcome>,
}

/// The operations of one scenario, shared by the load's workers: orders and replays, and the
/// payments and cancellations of the lifecycle rows (kept apart, so that every check of the
/// orders reads them as before).
#[derive(Debug, Clone)]
pub struct History {
    clock: Clock,
    ops: Arc<Mutex<Vec<Op>>>,
    settles: Arc<Mutex<Vec<SettleOp>>>,
}

/// What a worker wants to invoke.
#[derive(Debug, Clone, Serialize)]
pub struct Invocation {
    /// Client task.
    pub worker: usize,
    /// Target instance.
    pub instance: usize,
    /// Order or replay.
    pub kind: OpKind,
    /// Idempotency key.
    pub key: String,
    /// Buyer.
    pub user: String,
    /// Units.
    pub quantity: u32,
}

impl History {
    /// An empty history timed by `clock`.
    pub fn new(clock: Clock) -> Self {
        Self {
            clock,
            ops: Arc::default(),
            settles: Arc::default(),
        }
    }

    /// The scenario's clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Records an invocation; returns its id.
    pub fn invoke(&self, inv: Invocation) -> usize {
        let mut ops = self.ops.lock().unwrap();
        let id = ops.len();
        ops.push(Op {
            id,
            invocation: inv,
            invoked_ms: self.clock.now_ms(),
            completed_ms: None,
            outcome: None,
        });
        id
    }

    /// Records the completion of operation `id`.
    pub fn complete(&self, id: usize, outcome: Outcome) {
        let now = self.clock.now_ms();
        let mut ops = self.ops.lock().unwrap();
        ops[id].completed_ms = Some(now);
        ops[id].outcome = Some(outcome);
    }

    /// A copy of every operation so far.
    pub fn snapshot(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }

    /// Records a payment or cancellation of `order_id` sent to `instance`; returns its id.
    pub fn invoke_settle(&self, order_id: i64, action: SettleAction, instance: usize) -> usize {
        let mut settles = self.settles.lock().unwrap();
        settles.push(SettleOp {
            order_id,
            action,
            instance,
            invoked_ms: self.clock.now_ms(),
            completed_ms: None,
            outcome: None,
        });
        settles.len() - 1
    }

    /// Records the completion of settlement `id`.
    pub fn complete_settle(&self, id: usize, outcome: SettleOutcome) {
        let now = self.clock.now_ms();
        let mut settles = self.settles.lock().unwrap();
        settles[id].completed_ms = Some(now);
        settles[id].outcome = Some(outcome);
    }

    /// A copy of every payment and cancellation so far.
    pub fn settles(&self) -> Vec<SettleOp> {
        self.settles.lock().unwrap().clone()
    }

    /// Number of operations invoked so far.
    pub fn len(&self) -> usize {
        self.ops.lock().unwrap().len()
    }

    /// Whether nothing was invoked yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn http(status: u16, body: Value) -> Outcome {
        Outcome::classify(&Reply::Http { status, body })
    }

    #[test]
    fn responses_classify_as_ok_fail_or_info() {
        let order = json!({"order_id": 7, "sku": "s", "user_id": "u", "quantity": 1, "shard": 3, "fence": 42});
        assert_eq!(
            http(201, order.clone()),
            Outcome::Ok {
                status: 201,
                order: OrderAck {
                    order_id: 7,
                    shard: 3,
                    fence: 42
                }
            }
        );
        assert!(matches!(http(200, order), Outcome::Ok { status: 200, .. }));
        assert!(matches!(
            http(409, json!({"error": "sold_out"})),
            Outcome::Fail { status: 409, .. }
        ));
        assert!(matches!(
            http(503, json!({"error": "busy"})),
            Outcome::Fail { status: 503, .. }
        ));
        assert!(matches!(
            http(503, json!({"error": "unavailable"})),
            Outcome::Info {
                status: Some(503),
                ..
            }
        ));
        let internal = http(500, json!({"error": "internal"}));
        assert!(
            matches!(
                internal,
                Outcome::Info {
                    status: Some(500),
                    ..
                }
            ) && internal.is_server_error()
        );
        assert!(!http(503, json!({"error": "unavailable"})).is_server_error());
        assert!(
            matches!(http(201, json!({})), Outcome::Info { .. }),
            "a 201 without an order is unknown"
        );
        assert!(matches!(
            Outcome::classify(&Reply::Transport(TransportError::Connect)),
            Outcome::Fail { status: 0, .. }
        ));
        assert!(matches!(
            Outcome::classify(&Reply::Transport(TransportError::Timeout)),
            Outcome::Info { status: None, .. }
        ));
    }

    #[test]
    fn invocations_and_completions_are_recorded_in_order() {
        let history = History::new(Clock::start());
        let inv = Invocation {
            worker: 0,
            instance: 1,
            kind: OpKind::Order,
            key: "k".into(),
            user: "u".into(),
            quantity: 2,
        };
        let id = history.invoke(inv);
        assert!(history.snapshot()[id].outcome.is_none());
        history.complete(
            id,
            Outcome::Fail {
                status: 409,
                code: "sold_out".into(),
            },
        );
        let op = &history.snapshot()[id];
        assert!(op.completed_ms.unwrap() >= op.invoked_ms && op.outcome.is_some());
    }
}
