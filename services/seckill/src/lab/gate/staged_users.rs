//! A sale's buyers copied from PostgreSQL into Redis a chunk at a time, into a hash of their own
//! that the seed or the repair script then swaps in whole (`replace_users` in
//! [`WRITE_SALE`](super::script::WRITE_SALE)): neither this process nor Redis holds or runs more
//! than one chunk at once, however many buyers the sale has, and the sale's hash of buyers is
//! replaced in one step or not at all.
//!
//! The copy expires by itself ([`STAGED_TTL`]) if nothing swaps it in (the call failed half way),
//! and the swap makes it persistent.

use std::time::Duration;

use redis::aio::ConnectionManager;

use super::keys::GateKeys;
use crate::{domain::Sku, selling::InventoryError, store::Db};

/// Buyers per chunk: one PostgreSQL fetch and one `HSET` each.
const CHUNK: usize = 1000;

/// How long a copy nobody swapped in stays in Redis.
const STAGED_TTL: Duration = Duration::from_secs(60);

/// The key of a finished copy of a sale's buyers (absent in Redis when the sale has none).
#[derive(Debug)]
pub(super) struct StagedUsers(pub(super) String);

/// Copies the buyers of `sku` (one PostgreSQL snapshot) into a fresh key of the sale's slot.
pub(super) async fn stage(redis: &ConnectionManager, db: &Db, keys: &GateKeys, sku: &Sku) -> Result<StagedUsers, InventoryError> {
    let staged = keys.staged_users();
    let mut conn = redis.clone();
    let ttl = STAGED_TTL.as_millis() as i64;
    db.each_buyers_chunk(sku, CHUNK, async |chunk: Vec<(String, i64)>| -> Result<(), InventoryError> {
        let _: () = redis::pipe().hset_multiple(&staged, &chunk).ignore().pexpire(&staged, ttl).ignore().query_async(&mut conn).await?;
        Ok(())
    })
    .await?;
    Ok(StagedUsers(staged))
}
