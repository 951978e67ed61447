//! What every way of selling shares: the sale a request names ([`Catalog`]), the time a request
//! may take ([`RequestBounds`]), the stock hints in Redis ([`Hints`]), the shards' locks
//! ([`ShardLocks`]), and how a refused order is answered ([`BuyError`], [`Catalog::refuse`]).
//!
//! The product ([`owned`](crate::owned)) and the lab ([`lab`](crate::lab)) build on this layer;
//! [`inventory`](crate::inventory) admits each order and hands it to its sale's family.

mod bounds;
mod catalog;
mod error;
pub mod hints;
mod purchase;
mod refusals;
pub mod shard_locks;

pub use self::{
    bounds::RequestBounds,
    catalog::{Catalog, SaleView},
    error::InventoryError,
    hints::Hints,
    purchase::Purchase,
    refusals::BuyError,
    shard_locks::ShardLocks,
};
