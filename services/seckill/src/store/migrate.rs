//! Embedded migrations, applied at start-up. Instances starting together serialise on an advisory
//! lock, so each migration runs exactly once.

use tokio_postgres::Client;

use super::StoreError;

/// `(version, sql)` in order; append only.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../../migrations/0001_schema.sql")),
    (2, include_str!("../../migrations/0002_owned_shards.sql")),
    (3, include_str!("../../migrations/0003_shard_owner.sql")),
    (4, include_str!("../../migrations/0004_redis_gate.sql")),
    (5, include_str!("../../migrations/0005_gate_epoch.sql")),
    (6, include_str!("../../migrations/0006_claim_log.sql")),
    (7, include_str!("../../migrations/0007_lease_expiry.sql")),
    (8, include_str!("../../migrations/0008_set_based_batch.sql")),
    (9, include_str!("../../migrations/0009_set_based_gate_write.sql")),
    (10, include_str!("../../migrations/0010_hot_path_without_foreign_keys.sql")),
    (12, include_str!("../../migrations/0012_refusals_without_the_sale_row.sql")),
];

/// Advisory lock key shared by every instance ("seckill" in ASCII).
const MIGRATION_LOCK: i64 = 0x0073_6563_6b69_6c6c;

pub(super) async fn apply(client: &mut Client) -> Result<(), StoreError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await?;
    let applied: Vec<i32> = tx.query("SELECT version FROM schema_migrations", &[]).await?.iter().map(|r| r.get(0)).collect();
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| !applied.contains(v)) {
        tracing::info!(version, "applying migration");
        tx.batch_execute(sql).await?;
        tx.execute("INSERT INTO schema_migrations (version) VALUES ($1)", &[version]).await?;
    }
    tx.commit().await?;
    Ok(())
}
