//! # Consul (not built: how it maps)
//!
//! Consul is not obtainable on the machines this crate is tested on, so there is no `consul://`
//! backend. Its lock recipe maps onto lockkit's concepts one to one; a backend for it would plug into
//! the same seam as the others (`src/backend/mod.rs`):
//!
//! | lockkit | Consul |
//! |---|---|
//! | lease, renewed by the watchdog | a session with a `TTL` (`PUT /v1/session/create`), renewed with `PUT /v1/session/renew` every third of it; a renewal that answers 404 is `lost()` |
//! | acquire | `PUT /v1/kv/NAME?acquire=<session>`: true grants |
//! | lock-delay ([`Acquire::lock_delay`](crate::Acquire::lock_delay)) | the session's `LockDelay` (15 s by default): after a session is invalidated, its locks cannot be re-acquired for that long |
//! | fence | the key's `LockIndex` (bumped on every acquire), or its `ModifyIndex` as of the acquire: both only grow |
//! | waiting without polling | a blocking query on the key (`?index=<last ModifyIndex>&wait=...`) |
//! | release | `PUT /v1/kv/NAME?release=<session>` (owner-checked by the session), then destroy the session |
//!
//! As with etcd, Consul's session TTL is enforced by the servers, and Consul may wait up to twice the
//! TTL before invalidating a session: the guard's lease must be the TTL, never the doubled value.
