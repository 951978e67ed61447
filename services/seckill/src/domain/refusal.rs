//! [`Refusal`]: an order the sale turns down for a reason the client can act on. The same refusal
//! whichever strategy decided it, and the same message at every layer.

use super::OrderState;

/// Why a sale turned an order (or a request about a sale) down. Expected outcomes, not failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No sale with that SKU.
    #[error("no sale {0:?}")]
    UnknownSale(String),
    /// Fewer units left than asked, confirmed by PostgreSQL.
    #[error("sold out")]
    SoldOut,
    /// The user already bought the per-user limit.
    #[error("per-user limit reached")]
    UserLimitReached,
    /// The idempotency key was already used for a different order.
    #[error("Idempotency-Key was already used for a different order")]
    IdempotencyKeyReused,
    /// No order with that id for that user and secret (which of the three is wrong is not said).
    #[error("no such order")]
    UnknownOrder,
    /// The order's state does not allow the change asked for (a paid order cannot be cancelled,
    /// an expired one cannot be paid).
    #[error("the order is {0}")]
    OrderClosed(OrderState),
}
