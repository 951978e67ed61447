//! [`InventoryError`]: why the inventory could not sell, or could not say. Expected refusals
//! (sold out, a user limit, a reused key) are a [`Refusal`] a caller matches on; dependencies
//! that are away are retryable; the rest are bugs. The HTTP edge maps each to a status.

use crate::{domain::Refusal, store::StoreError};

/// Why an inventory operation did not complete.
#[derive(Debug, Clone, thiserror::Error)]
pub enum InventoryError {
    /// The sale turned the order down (unknown sale, sold out, user limit, reused key).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The request deadline passed (waiting for stock, a lock, or admission).
    #[error("busy, retry shortly")]
    Busy,
    /// Redis did not answer.
    #[error("redis unavailable: {0}")]
    RedisUnavailable(String),
    /// PostgreSQL failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A bug or an unexpected state.
    #[error("{0}")]
    Bug(String),
}

impl InventoryError {
    /// Whether trying again later may succeed (the deadline passed, or a dependency is away).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Busy | Self::RedisUnavailable(_) => true,
            Self::Store(e) => e.is_unavailable(),
            _ => false,
        }
    }
}

impl From<lockkit::Error> for InventoryError {
    fn from(e: lockkit::Error) -> Self {
        if e.is_timeout() {
            Self::Busy
        } else if e.is_retryable() {
            Self::RedisUnavailable(e.to_string())
        } else {
            Self::Bug(format!("lock: {e}"))
        }
    }
}

impl From<redis::RedisError> for InventoryError {
    fn from(e: redis::RedisError) -> Self {
        Self::RedisUnavailable(e.to_string())
    }
}
