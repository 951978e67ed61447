//! [`Refusal`]: an order the sale turns down for a reason the client can act on. The same refusal
//! whichever strategy decided it, and the same message at every layer.

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
}
