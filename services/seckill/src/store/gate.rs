//! The `redis-gate` writer's side of PostgreSQL: writing a batch of stream entries (idempotent on
//! their reference), finding an order by reference, and the per-shard truth and the buyers'
//! counts that seeding and reconciliation write back to Redis.

use tokio_postgres::IsolationLevel;

use super::{Db, StoreError};
use crate::domain::{ShardId, Sku};

/// One stream entry as the writer hands it to PostgreSQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateEntry {
    /// The reference Redis gave the client (unique per sale).
    pub gate_ref: i64,
    /// The generation of the sale the entry was decided for.
    pub generation: i64,
    /// The buyer.
    pub user_id: String,
    /// Units bought.
    pub quantity: u32,
    /// The idempotency key, if the request had one.
    pub idempotency_key: Option<String>,
    /// The shards the units were taken from, with the units of each.
    pub parts: Vec<(ShardId, u32)>,
}

/// What became of one entry of a written batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateWritten {
    /// Written now, as this order.
    Written(i64),
    /// Already written before (the same reference): nothing new.
    Duplicate,
    /// Decided for an earlier generation of the sale: discarded.
    Stale,
    /// Its idempotency key belongs to another order (possible only after Redis lost its data).
    Conflict,
}

/// One shard as PostgreSQL sees it, for reconciliation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardTruth {
    /// The shard.
    pub shard: ShardId,
    /// Its initial stock.
    pub initial: i64,
    /// Units in orders taken from it.
    pub sold: i64,
}

impl Db {
    /// Writes a batch of entries in one transaction; one outcome per entry, in order.
    pub async fn gate_write(&self, sku: &Sku, entries: &[GateEntry]) -> Result<Vec<GateWritten>, StoreError> {
        let refs: Vec<i64> = entries.iter().map(|e| e.gate_ref).collect();
        let generations: Vec<i64> = entries.iter().map(|e| e.generation).collect();
        let users: Vec<&str> = entries.iter().map(|e| e.user_id.as_str()).collect();
        let quantities: Vec<i32> = entries.iter().map(|e| e.quantity as i32).collect();
        let keys: Vec<Option<&str>> = entries.iter().map(|e| e.idempotency_key.as_deref()).collect();
        let (mut part_entry, mut part_shard, mut part_take) = (Vec::new(), Vec::new(), Vec::new());
        for (i, entry) in entries.iter().enumerate() {
            for (shard, take) in &entry.parts {
                part_entry.push(i as i32 + 1);
                part_shard.push(shard.as_sql());
                part_take.push(*take as i32);
            }
        }
        let client = self.client().await?;
        // Prepared once per connection, as the owners' batch commit is: a write is one round
        // trip with a kept plan.
        let write =
            client.prepare_cached("SELECT ord, outcome, order_id FROM seckill_gate_write($1, $2, $3, $4, $5, $6, $7, $8, $9)").await?;
        let rows = client
            .query(&write, &[&sku.as_str(), &refs, &generations, &users, &quantities, &keys, &part_entry, &part_shard, &part_take])
            .await?;
        let mut outcomes = vec![None; entries.len()];
        for row in rows {
            let ord: i32 = row.get(0);
            let outcome: &str = row.get(1);
            let written = match outcome {
                "written" => GateWritten::Written(row.get(2)),
                "duplicate" => GateWritten::Duplicate,
                "stale" => GateWritten::Stale,
                "conflict" => GateWritten::Conflict,
                other => return Err(StoreError::Unexpected(format!("seckill_gate_write answered {other:?}"))),
            };
            if let Some(slot) = usize::try_from(ord - 1).ok().and_then(|i| outcomes.get_mut(i)) {
                *slot = Some(written);
            }
        }
        outcomes
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| StoreError::Unexpected("seckill_gate_write left an entry without an outcome".into()))
    }

    /// The order id written for `user`'s `gate_ref`, if it is in PostgreSQL yet (a reference can be
    /// handed out again after Redis lost its data, so the buyer is checked too).
    pub async fn order_by_gate_ref(&self, sku: &Sku, gate_ref: i64, user: &str) -> Result<Option<i64>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT id FROM orders WHERE sku = $1 AND gate_ref = $2 AND user_id = $3", &[&sku.as_str(), &gate_ref, &user])
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// The highest reference written for the sale (0 if none): a floor for Redis's counter when
    /// it is seeded again after losing its data, so new references never collide with old ones.
    pub async fn max_gate_ref(&self, sku: &Sku) -> Result<i64, StoreError> {
        let client = self.client().await?;
        let row = client.query_one("SELECT COALESCE(max(gate_ref), 0) FROM orders WHERE sku = $1", &[&sku.as_str()]).await?;
        Ok(row.get(0))
    }

    /// Raises the sale's gate epoch and returns it (see migration 0005): the references handed out
    /// after this seed start above `epoch << 32`.
    pub async fn next_gate_epoch(&self, sku: &Sku) -> Result<i64, StoreError> {
        let client = self.client().await?;
        let row =
            client.query_opt("UPDATE sales SET gate_epoch = gate_epoch + 1 WHERE sku = $1 RETURNING gate_epoch", &[&sku.as_str()]).await?;
        Ok(row.map_or(0, |r| r.get(0)))
    }

    /// Units each user bought in the sale, as PostgreSQL has them, `chunk` buyers at a time: `each`
    /// gets every chunk in turn, so no more than one is held however many buyers the sale has.
    /// They all come from one snapshot (a read-only repeatable-read transaction, read through a
    /// portal).
    pub async fn each_buyers_chunk<E: From<StoreError>>(
        &self,
        sku: &Sku,
        chunk: usize,
        mut each: impl AsyncFnMut(Vec<(String, i64)>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(StoreError::from)?;
        let portal =
            tx.bind("SELECT user_id, bought FROM user_purchases WHERE sku = $1", &[&sku.as_str()]).await.map_err(StoreError::from)?;
        let max_rows = i32::try_from(chunk).unwrap_or(i32::MAX);
        loop {
            let rows = tx.query_portal(&portal, max_rows).await.map_err(StoreError::from)?;
            if rows.is_empty() {
                break;
            }
            each(rows.iter().map(|r| (r.get(0), i64::from(r.get::<_, i32>(1)))).collect()).await?;
        }
        tx.commit().await.map_err(StoreError::from)?;
        Ok(())
    }

    /// Per shard, its initial stock and the units sold from it (from `order_parts`), in shard order.
    pub async fn shard_truth(&self, sku: &Sku) -> Result<Vec<ShardTruth>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT s.shard, s.initial, COALESCE(SUM(p.quantity), 0)::bigint
                   FROM shards s LEFT JOIN order_parts p ON p.sku = s.sku AND p.shard = s.shard
                  WHERE s.sku = $1 GROUP BY s.shard, s.initial ORDER BY s.shard",
                &[&sku.as_str()],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| ShardTruth { shard: ShardId::new(r.get::<_, i32>(0) as u32), initial: i64::from(r.get::<_, i32>(1)), sold: r.get(2) })
            .collect())
    }
}
