//! What buyers do with a reserved order in the lifecycle rows: pay it or cancel it, through
//! either instance, or walk away and let it expire. Each such call is recorded like an order
//! operation (invoked, then completed with a classified outcome) in the
//! [`History`](crate::history::History), and checked against the order's final state in
//! PostgreSQL.

use serde::Serialize;
use serde_json::Value;

use crate::api::{Reply, TransportError};

/// What a buyer asked of its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SettleAction {
    /// `POST /v1/orders/{id}/pay`.
    Pay,
    /// `POST /v1/orders/{id}/cancel`.
    Cancel,
}

impl SettleAction {
    /// The path segment of the call.
    pub fn path(self) -> &'static str {
        match self {
            Self::Pay => "pay",
            Self::Cancel => "cancel",
        }
    }

    /// The state an order ends in when the call succeeds.
    pub fn target(self) -> &'static str {
        match self {
            Self::Pay => "paid",
            Self::Cancel => "cancelled",
        }
    }
}

/// How a settlement call completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SettleOutcome {
    /// `200`: the order is in `state` now (the call's target, or already was).
    Done {
        /// The state answered.
        state: String,
    },
    /// `409 order_closed`: the order had ended otherwise (paid, cancelled or expired).
    Refused,
    /// Another definite answer (`404`, another `4xx`): a bug for an order the suite bought.
    Rejected {
        /// HTTP status.
        status: u16,
        /// The error code.
        code: String,
    },
    /// Unknown whether it happened: no answer, a broken connection, `503` or `5xx`.
    Unknown {
        /// HTTP status, if there was an answer.
        status: Option<u16>,
        /// Why it is unknown.
        reason: String,
    },
}

impl SettleOutcome {
    /// Classifies a reply to a pay or cancel call.
    pub fn classify(reply: &Reply) -> Self {
        let Reply::Http { status, body } = reply else {
            let reason = match reply {
                Reply::Transport(TransportError::Connect) => "connect",
                Reply::Transport(TransportError::Timeout) => "timeout",
                _ => "broken",
            };
            return Self::Unknown {
                status: None,
                reason: reason.into(),
            };
        };
        let code = body.get("error").and_then(Value::as_str).unwrap_or("");
        match (*status, body.get("state").and_then(Value::as_str)) {
            (200, Some(state)) => Self::Done {
                state: state.to_owned(),
            },
            (409, _) if code == "order_closed" => Self::Refused,
            (status @ 400..=499, _) => Self::Rejected {
                status,
                code: code.to_owned(),
            },
            (status, _) => Self::Unknown {
                status: Some(status),
                reason: if code.is_empty() {
                    status.to_string()
                } else {
                    code.to_owned()
                },
            },
        }
    }

    /// A 5xx other than the documented 503.
    pub fn is_server_error(&self) -> bool {
        matches!(self, Self::Unknown { status: Some(s), .. } if *s >= 500 && *s != 503)
    }
}

/// One recorded pay or cancel call.
#[derive(Debug, Clone, Serialize)]
pub struct SettleOp {
    /// The order.
    pub order_id: i64,
    /// Pay or cancel.
    pub action: SettleAction,
    /// The instance it was sent to.
    pub instance: usize,
    /// When it was sent (ms since the scenario started).
    pub invoked_ms: u64,
    /// When it completed (`None` while in flight).
    pub completed_ms: Option<u64>,
    /// How it completed.
    pub outcome: Option<SettleOutcome>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn http(status: u16, body: Value) -> SettleOutcome {
        SettleOutcome::classify(&Reply::Http { status, body })
    }

    #[test]
    fn answers_classify_as_done_refused_rejected_or_unknown() {
        assert_eq!(
            http(200, json!({"order_id": 1, "state": "paid"})),
            SettleOutcome::Done {
                state: "paid".into()
            }
        );
        assert_eq!(
            http(409, json!({"error": "order_closed"})),
            SettleOutcome::Refused
        );
        assert!(matches!(
            http(404, json!({"error": "unknown_order"})),
            SettleOutcome::Rejected { status: 404, .. }
        ));
        let unavailable = http(503, json!({"error": "unavailable"}));
        assert!(
            matches!(unavailable, SettleOutcome::Unknown { .. }) && !unavailable.is_server_error()
        );
        assert!(http(500, json!({"error": "internal"})).is_server_error());
        assert!(matches!(
            SettleOutcome::classify(&Reply::Transport(TransportError::Timeout)),
            SettleOutcome::Unknown { status: None, .. }
        ));
    }
}
