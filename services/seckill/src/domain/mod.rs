//! Validated domain values: once constructed, a value is known good, so nothing past the routes
//! re-checks input. Parsing returns a message meant for the client.

mod order;
mod order_state;
mod refusal;
mod sale;
mod shard_claim;
mod shard_id;
mod sku;
mod strategy;
mod user_id;

pub use order::{OrderBody, OrderRequest, Quantity};
pub use order_state::{OrderState, ReturnPath};
pub use refusal::Refusal;
pub use sale::{DEFAULT_PAYMENT_WINDOW, Sale, SaleSpec, SaleSpecBody};
pub use shard_claim::ShardClaim;
pub use shard_id::ShardId;
pub use sku::Sku;
pub use strategy::{Fencing, GateAck, StrategyKind};
pub use user_id::UserId;
