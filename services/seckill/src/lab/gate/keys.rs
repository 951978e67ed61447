//! The Redis keys of one `redis-gate` sale. They share the hash tag `{seckill:gate:SKU}`, so every
//! script touches one slot and runs unchanged on Redis Cluster.

use crate::domain::Sku;

/// The keys of one sale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateKeys {
    /// Hash: `gen` (the sale's generation), `limit` (per user), `shards`, `left` (units left in
    /// all shards, so a sold-out answer costs O(1)). Missing: the sale is not seeded (new, or
    /// Redis lost its data).
    pub meta: String,
    /// Hash: shard index -> units left in it.
    pub stock: String,
    /// Hash: user id -> units bought.
    pub users: String,
    /// Hash: idempotency key -> the order it made (`ref|quantity|shard|user`).
    pub keys: String,
    /// Counter of order references; never reset (a reset keeps counting), so a reference is
    /// unique per sale for good.
    pub seq: String,
    /// The stream of decided orders, read by the consumer group [`GROUP`].
    pub stream: String,
    /// The pub/sub channel on which writers announce committed durable entries (not a key).
    pub written: String,
}

/// The consumer group of every sale's stream: one consumer per instance.
pub const GROUP: &str = "writers";

impl GateKeys {
    /// A fresh key, in the sale's slot, for a hash of buyers being copied in before it replaces
    /// [`users`](Self::users) (see `staged_users`); fresh, so that two copies never mix.
    pub fn staged_users(&self) -> String {
        format!("{}:staged:{:016x}", self.users, rand::random::<u64>())
    }

    /// The keys of `sku`.
    pub fn new(sku: &Sku) -> Self {
        let tag = format!("{{seckill:gate:{sku}}}");
        Self {
            meta: format!("{tag}:meta"),
            stock: format!("{tag}:stock"),
            users: format!("{tag}:users"),
            keys: format!("{tag}:keys"),
            seq: format!("{tag}:seq"),
            stream: format!("{tag}:stream"),
            written: format!("{tag}:written"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_shares_the_sales_hash_tag() {
        let keys = GateKeys::new(&Sku::parse("phone-1").unwrap());
        for key in [&keys.meta, &keys.stock, &keys.users, &keys.keys, &keys.seq, &keys.stream, &keys.written, &keys.staged_users()] {
            assert!(key.starts_with("{seckill:gate:phone-1}:"), "{key}");
        }
    }
}
