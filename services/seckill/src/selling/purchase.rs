//! [`Purchase`]: an order's outcome as the client sees it.

use super::InventoryError;
use crate::{
    domain::{OrderRequest, Refusal},
    store::OrderRecord,
};

/// An order's outcome as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purchase {
    /// The order.
    pub record: OrderRecord,
    /// True when this answers a replayed idempotency key (no new order was made).
    pub replayed: bool,
}

impl Purchase {
    /// The answer to `request`, whose idempotency key belongs to the committed order `prior`: a
    /// replay of it when the request asks for the same buyer and quantity, else
    /// `idempotency_key_reused`.
    pub fn replay(request: &OrderRequest, prior: OrderRecord) -> Result<Self, InventoryError> {
        if prior.user_id == request.user_id.as_str() && prior.quantity == request.quantity.get() {
            Ok(Self { record: prior, replayed: true })
        } else {
            Err(Refusal::IdempotencyKeyReused.into())
        }
    }
}
