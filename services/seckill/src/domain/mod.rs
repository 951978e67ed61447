//! Validated domain values: once constructed, a value is known good, so nothing past the routes
//! re-checks input. Parsing returns a message meant for the client.

mod order;
mod sale;
mod sku;
mod strategy;
mod user_id;

pub use order::{OrderBody, OrderRequest, Quantity};
pub use sale::{SaleSpec, SaleSpecBody};
pub use sku::Sku;
pub use strategy::StrategyKind;
pub use user_id::UserId;
