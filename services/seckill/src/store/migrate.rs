//! Embedded migrations, applied at start-up. Instances starting together serialise on an advisory
//! lock, so each migration runs exactly once.

use tokio_postgres::Client;

use super::StoreError;

/// `(version, sql)` in order; append only. Version 1 is the whole schema, squashed from the
/// migrations before it while nothing was deployed (0.1.0): a database that had applied those
/// (versions 1 to 12) has this schema already, so it applies nothing here.
///
/// Version 13 follows 1 because a database migrated before the squash recorded 2 to 12.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../../migrations/0001_schema.sql")),
    (13, include_str!("../../migrations/0013_order_lifecycle.sql")),
    (14, include_str!("../../migrations/0014_paid_counter.sql")),
    (15, include_str!("../../migrations/0015_expiry_reads_orders_due.sql")),
    (16, include_str!("../../migrations/0016_batch_plans_on_empty_tables.sql")),
    (17, include_str!("../../migrations/0017_fold_returns_plan_cached.sql")),
    (18, include_str!("../../migrations/0018_key_probe_per_key.sql")),
    (19, include_str!("../../migrations/0019_gate_duplicate_probe_per_entry.sql")),
    (20, include_str!("../../migrations/0020_expiry_plan_on_empty_tables.sql")),
    (21, include_str!("../../migrations/0021_buyer_counts_written_once.sql")),
    (22, include_str!("../../migrations/0022_plain_batches_skip_the_fold_and_the_count_update.sql")),
    (23, include_str!("../../migrations/0023_batches_fold_returns_only_when_one_is_pending.sql")),
    (24, include_str!("../../migrations/0024_batches_answer_replays.sql")),
    (25, include_str!("../../migrations/0025_replays_lock_no_buyer.sql")),
    (26, include_str!("../../migrations/0026_drop_the_superseded_batch_function.sql")),
    (27, include_str!("../../migrations/0027_single_part_orders_keep_their_part_in_the_order.sql")),
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
