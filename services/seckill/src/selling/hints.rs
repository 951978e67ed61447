//! A Redis-side hint of each shard's remaining stock, so requests skip empty shards without
//! touching PostgreSQL. Advisory only: PostgreSQL decides. A hint that is too high costs one read
//! (and is corrected); a missing or outdated hint set (Redis restarted, sale reset) is rebuilt
//! from PostgreSQL.
//!
//! Every write names the generation it was made for and lands only while the hints carry that
//! generation: a write of a sale's previous generation that arrives after a reset rebuilt the
//! hints (a shard of the old sale marked empty) must not mark a shard of the new one empty, since
//! nothing would correct it (owners only look at shards whose hint has stock).

use std::sync::Arc;

use redis::{AsyncCommands, aio::ConnectionManager};

use super::InventoryError;
use crate::{
    domain::{Sale, ShardId, Sku},
    store::Db,
};

/// Field holding the sale's generation; the others are shard indexes.
const GENERATION: &str = "gen";

/// Sets a shard's hint (`ARGV[2]` to `ARGV[3]`) if the hints carry generation `ARGV[1]`.
const SET_IN_GENERATION: &str = r"
if redis.call('HGET', KEYS[1], 'gen') == ARGV[1] then
    redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
end
return 0";

/// Subtracts units from shards (`ARGV[2..]`: shard, units, shard, units, ...) if the hints carry
/// generation `ARGV[1]`.
const TAKE_IN_GENERATION: &str = r"
if redis.call('HGET', KEYS[1], 'gen') == ARGV[1] then
    for i = 2, #ARGV, 2 do
        redis.call('HINCRBY', KEYS[1], ARGV[i], -tonumber(ARGV[i + 1]))
    end
end
return 0";

/// One sale's hints as fetched: the generation they were built for and a value per shard.
#[derive(Debug, Clone, Default)]
pub struct HintSet {
    fields: Vec<(String, i64)>,
}

impl HintSet {
    /// The generation of the sale the hints were built for; `None` if there are none (new sale,
    /// or Redis lost its data).
    pub fn generation(&self) -> Option<i64> {
        self.fields.iter().find(|(f, _)| f == GENERATION).map(|(_, v)| *v)
    }

    /// Remaining stock per shard, if the hints are complete and belong to this generation of `sale`.
    pub fn for_sale(&self, sale: &Sale) -> Option<Vec<i64>> {
        if self.generation() != Some(sale.generation) {
            return None;
        }
        let mut hints = vec![None; sale.spec.shards as usize];
        for (field, value) in &self.fields {
            if let Some(slot) = field.parse::<usize>().ok().and_then(|i| hints.get_mut(i)) {
                *slot = Some(*value);
            }
        }
        hints.into_iter().collect()
    }
}

/// Hints of every sale, in one Redis hash per sale.
#[derive(Clone)]
pub struct Hints {
    redis: ConnectionManager,
    set_in_generation: Arc<redis::Script>,
    take_in_generation: Arc<redis::Script>,
}

impl Hints {
    /// Wraps a Redis connection (auto-reconnecting).
    pub fn new(redis: ConnectionManager) -> Self {
        Self {
            redis,
            set_in_generation: Arc::new(redis::Script::new(SET_IN_GENERATION)),
            take_in_generation: Arc::new(redis::Script::new(TAKE_IN_GENERATION)),
        }
    }

    fn key(sku: &Sku) -> String {
        format!("seckill:{{{sku}}}:hints")
    }

    /// The hints of `sku` as Redis has them now, in one round trip.
    pub async fn fetch(&self, sku: &Sku) -> Result<HintSet, InventoryError> {
        let fields: Vec<(String, i64)> = self.redis.clone().hgetall(Self::key(sku)).await?;
        Ok(HintSet { fields })
    }

    /// Remaining stock per shard for `sale`, rebuilt from PostgreSQL when missing or outdated.
    pub async fn read(&self, db: &Db, sale: &Sale) -> Result<Vec<i64>, InventoryError> {
        match self.fetch(&sale.sku).await?.for_sale(sale) {
            Some(hints) => Ok(hints),
            None => self.rebuild(db, sale).await,
        }
    }

    /// Replaces the hints with PostgreSQL's current stock.
    pub async fn rebuild(&self, db: &Db, sale: &Sale) -> Result<Vec<i64>, InventoryError> {
        let rows = db.shard_rows(&sale.sku).await?;
        let mut items: Vec<(String, i64)> = rows.iter().map(|r| (r.shard.to_string(), r.remaining)).collect();
        items.push((GENERATION.into(), sale.generation));
        let key = Self::key(&sale.sku);
        let _: () = redis::pipe().atomic().del(&key).hset_multiple(&key, &items).query_async(&mut self.redis.clone()).await?;
        Ok(rows.iter().map(|r| r.remaining).collect())
    }

    /// Records the exact stock of one shard of `sale` (just read from PostgreSQL), unless the
    /// hints belong to another generation of the sale by now.
    pub async fn set(&self, sale: &Sale, shard: ShardId, remaining: i64) -> Result<(), InventoryError> {
        let _: i64 = self
            .set_in_generation
            .key(Self::key(&sale.sku))
            .arg(sale.generation)
            .arg(shard.get())
            .arg(remaining)
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    /// Subtracts units of `sale` just sold (`(shard, units)` pairs), unless the hints belong to
    /// another generation of the sale by now.
    pub async fn take(&self, sale: &Sale, parts: impl IntoIterator<Item = (ShardId, u32)>) -> Result<(), InventoryError> {
        let mut invocation = self.take_in_generation.key(Self::key(&sale.sku));
        invocation.arg(sale.generation);
        for (shard, units) in parts {
            invocation.arg(shard.get()).arg(units);
        }
        let _: i64 = invocation.invoke_async(&mut self.redis.clone()).await?;
        Ok(())
    }
}

impl Hints {
    /// Whether Redis answers.
    pub async fn ping(&self) -> bool {
        redis::cmd("PING").query_async::<String>(&mut self.redis.clone()).await.is_ok()
    }
}
