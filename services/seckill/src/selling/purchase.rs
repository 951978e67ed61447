//! [`Purchase`]: an order's outcome as the client sees it.

use crate::store::OrderRecord;

/// An order's outcome as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purchase {
    /// The order.
    pub record: OrderRecord,
    /// True when this answers a replayed idempotency key (no new order was made).
    pub replayed: bool,
}
