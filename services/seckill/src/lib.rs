//! seckill: a reference flash-sale service. Stock is split over shards, each guarded by a lock
//! from [`lockkit`] on whichever backend `SECKILL_LOCKS__URL` names (Redis unless set); every write
//! to PostgreSQL is fenced, so it never oversells, also when a lock holder pauses past its lease,
//! the lock server loses its data, or the network splits.
//!
//! # Layout
//!
//! | module | what lives there |
//! |---|---|
//! | [`config`] | settings: defaults, optional TOML file, environment; secrets never printed |
//! | [`startup`] | [`Application`](startup::Application): connect, migrate, bind, run |
//! | [`routes`] | HTTP handlers: parse into domain values, call the inventory |
//! | [`domain`] | validated values: SKU, user id, quantity, sale spec, strategy |
//! | [`owned`] | **the product**: shards owned through their locks, sold from memory, committed in fenced batches |
//! | [`inventory`] | admits an order and hands it to its sale's family: the product or the lab |
//! | [`selling`] | what every family shares: the sale catalog, request bounds, stock hints, shard locks, refusals; `InventoryError` |
//! | [`lab`] | the comparison: the articles' per-request strategies, `redis-gate`, the controls and failpoints |
//! | [`store`] | PostgreSQL: migrations, sales, shards, orders, owners' claims and batches, audit; `StoreError` |
//! | [`error`] | the HTTP edge: `ApiError`, client mistakes and the store's and inventory's errors as statuses, in one place |
//! | [`telemetry`] | logs and the Prometheus recorder |
//! | [`traffic`] | what this instance answered over the last seconds, per sale (the live view) |

#![forbid(unsafe_code)]

pub mod config;
pub mod domain;
pub mod error;
pub mod inventory;
pub mod lab;
pub mod lifecycle;
pub mod owned;
pub mod routes;
pub mod selling;
#[cfg(test)]
mod settings_doc;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod traffic;
