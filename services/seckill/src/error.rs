//! Every way a request can fail, and the one place they become HTTP statuses. A client's mistake
//! is always a 4xx; a 5xx means our fault or a dependency's.

use actix_web::{HttpResponse, ResponseError, http::StatusCode};
use serde_json::json;

use crate::{domain::Refusal, lab::gate::reconcile::ReconcileError, selling::InventoryError, store::StoreError};

/// An error answered to a client as `{"error": CODE, "message": ...}`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// Malformed or out-of-range input.
    #[error("{0}")]
    InvalidRequest(String),
    /// The body was larger than allowed.
    #[error("request body larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// Not JSON.
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    /// Admin route without the right bearer token.
    #[error("missing or wrong admin token")]
    Unauthorized,
    /// The sale turned the request down (unknown sale, sold out, user limit, reused key).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// No such route.
    #[error("no route {0}")]
    NotFound(String),
    /// Reconciliation of a sale that does not use `redis-gate`.
    #[error("{0}")]
    NotRedisGate(String),
    /// Reconciliation refused: orders are still queued or in flight.
    #[error("{0}")]
    QueueNotDrained(String),
    /// The request deadline passed while waiting (locks, retries).
    #[error("busy, retry shortly")]
    Busy,
    /// Redis or PostgreSQL cannot be reached.
    #[error("{0} unavailable, retry shortly")]
    Unavailable(&'static str),
    /// A bug or an unexpected state; details are logged, not returned.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// The stable machine-readable code of the error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::Unauthorized => "unauthorized",
            Self::Refused(Refusal::UnknownSale(_)) => "unknown_sale",
            Self::NotFound(_) => "not_found",
            Self::Refused(Refusal::SoldOut) => "sold_out",
            Self::Refused(Refusal::UserLimitReached) => "user_limit_reached",
            Self::Refused(Refusal::IdempotencyKeyReused) => "idempotency_key_reused",
            Self::Refused(Refusal::UnknownOrder) => "unknown_order",
            Self::Refused(Refusal::OrderClosed(_)) => "order_closed",
            Self::NotRedisGate(_) => "not_redis_gate",
            Self::QueueNotDrained(_) => "queue_not_drained",
            Self::Busy => "busy",
            Self::Unavailable(_) => "unavailable",
            Self::Internal(_) => "internal",
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Refused(Refusal::UnknownSale(_) | Refusal::UnknownOrder) | Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Refused(Refusal::SoldOut | Refusal::UserLimitReached | Refusal::OrderClosed(_))
            | Self::NotRedisGate(_)
            | Self::QueueNotDrained(_) => StatusCode::CONFLICT,
            Self::Refused(Refusal::IdempotencyKeyReused) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Busy | Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let Self::Internal(detail) = self {
            tracing::error!(%detail, "internal error");
        }
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Self::Busy | Self::Unavailable(_) => {
                response.insert_header(("Retry-After", "1"));
            }
            Self::Unauthorized => {
                response.insert_header(("WWW-Authenticate", "Bearer"));
            }
            _ => {}
        }
        response.json(json!({"error": self.code(), "message": self.to_string()}))
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        if e.is_unavailable() {
            tracing::warn!(error = %e, "database unavailable");
            Self::Unavailable("database")
        } else {
            Self::Internal(e.to_string())
        }
    }
}

impl From<InventoryError> for ApiError {
    fn from(e: InventoryError) -> Self {
        match e {
            InventoryError::Refused(refusal) => Self::Refused(refusal),
            InventoryError::Busy => Self::Busy,
            InventoryError::RedisUnavailable(cause) => {
                tracing::warn!(%cause, "redis unavailable");
                Self::Unavailable("redis")
            }
            InventoryError::Store(e) => e.into(),
            InventoryError::Bug(detail) => Self::Internal(detail),
        }
    }
}

impl From<ReconcileError> for ApiError {
    fn from(e: ReconcileError) -> Self {
        match e {
            ReconcileError::NotGate(_) => Self::NotRedisGate(e.to_string()),
            ReconcileError::NotDrained { .. } => Self::QueueNotDrained(e.to_string()),
            ReconcileError::Moving => Self::Busy,
            ReconcileError::Inventory(e) => e.into(),
        }
    }
}
