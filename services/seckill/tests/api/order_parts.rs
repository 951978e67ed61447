//! Where an order's parts live: in the order's own row when it was taken from one shard, in
//! `order_split_parts` when from several (migration 0027), and every part in the view
//! `order_parts`, as in the table it replaced.

use crate::{
    helpers::{db_at, drop_scratch_database, scratch_database},
    schema::{apply_files, migrations_dir, sql_files},
};

/// One part as `order_parts` shows it: order, shard, quantity, fence, lease deadline (as text).
type Part = (i64, i32, i32, i64, Option<String>);

const PARTS: &str =
    "SELECT order_id, shard, quantity, fence, lease_until::text FROM order_parts WHERE sku = 'parts' ORDER BY order_id, shard";

/// The orders written before migration 0027 keep every part: a database migrated up to 0026
/// holds an order of one shard and one split over two, written by the batch function of its day;
/// after 0027 the view shows the same parts, deadlines included, and only the split order keeps
/// part rows.
#[tokio::test]
async fn migration_0027_keeps_every_part_of_the_orders_written_before_it() {
    let (url, name) = scratch_database("parts_0027").await;
    let (before, after): (Vec<_>, Vec<_>) =
        sql_files(migrations_dir()).into_iter().partition(|f| f.file_name().unwrap().to_str().unwrap() < "0027");
    apply_files(&url, &before);
    let db = db_at(&url).await;
    db.batch_execute(
        "INSERT INTO sales (sku, total, shard_count, per_user_limit, max_per_order, strategy, generation)
             VALUES ('parts', 200, 2, 2, 2, 'owned-shards', 1);
         INSERT INTO shards (sku, shard, initial, remaining, fence) VALUES ('parts', 0, 100, 100, 7), ('parts', 1, 100, 100, 7);
         SELECT count(*) FROM seckill_commit_orders('parts', 1, 2, true, true, '{0,1}', '{7,7}', '{100,100}',
             ARRAY['2026-12-01 10:00:00+00', '2026-12-01 10:00:01+00']::timestamptz[],
             '{ann,bob}', '{1,2}', '{a1,b1}', '{1,2,2}', '{0,0,1}', '{1,1,1}');",
    )
    .await
    .unwrap();
    let parts = async || -> Vec<Part> {
        db.query(PARTS, &[]).await.unwrap().iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))).collect()
    };
    let written = parts().await;

    apply_files(&url, &after);
    let migrated = parts().await;
    let split: Vec<(String, bool)> = db
        .query("SELECT user_id, split FROM orders WHERE sku = 'parts' ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let rows: i64 = db.query_one("SELECT count(*) FROM order_split_parts", &[]).await.unwrap().get(0);
    drop(db);
    drop_scratch_database(&name).await;

    assert_eq!(written.len(), 3, "ann's order has one part, bob's two: {written:?}");
    assert_eq!(migrated, written);
    assert_eq!(split, [("ann".to_string(), false), ("bob".to_string(), true)]);
    assert_eq!(rows, 2, "only bob's split order keeps part rows");
}
