//! A Redis-side hint of each shard's remaining stock, so requests skip empty shards without
//! touching PostgreSQL. Advisory only: PostgreSQL decides. A hint that is too high costs one read
//! (and is corrected); a missing or outdated hint set (Redis restarted, sale reset) is rebuilt
//! from PostgreSQL.

use redis::{AsyncCommands, aio::ConnectionManager};

use super::planner::Part;
use crate::{
    domain::{Sale, ShardId, Sku},
    inventory::InventoryError,
    store::Db,
};

/// Field holding the sale's generation; the others are shard indexes.
const GENERATION: &str = "gen";

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
}

impl Hints {
    /// Wraps a Redis connection (auto-reconnecting).
    pub fn new(redis: ConnectionManager) -> Self {
        Self { redis }
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

    /// Records the exact stock of one shard (just read from PostgreSQL).
    pub async fn set(&self, sku: &Sku, shard: ShardId, remaining: i64) -> Result<(), InventoryError> {
        let _: () = self.redis.clone().hset(Self::key(sku), shard.get(), remaining).await?;
        Ok(())
    }

    /// Subtracts units just sold (the parts of the plan that sold them).
    pub async fn take(&self, sku: &Sku, parts: &[Part]) -> Result<(), InventoryError> {
        let key = Self::key(sku);
        let mut pipe = redis::pipe();
        for part in parts {
            pipe.hincr(&key, part.shard.get(), -i64::from(part.take)).ignore();
        }
        let _: () = pipe.query_async(&mut self.redis.clone()).await?;
        Ok(())
    }
}

impl Hints {
    /// Whether Redis answers.
    pub async fn ping(&self) -> bool {
        redis::cmd("PING").query_async::<String>(&mut self.redis.clone()).await.is_ok()
    }
}
