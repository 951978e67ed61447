//! The schema: what the service's migrator builds on an empty database is what the migration
//! files say, file by file in order (so a migration file that `store/migrate.rs` does not list, or
//! lists out of order, shows here). The control is the squash itself: the one schema file builds
//! exactly what the twelve migrations before it built (from git history, when the clone has it).

use std::{path::Path, process::Command, time::Duration};

use seckill::store::Db;

use crate::helpers::{drop_scratch_database, scratch_database};

/// The migrations the schema file was squashed from, as of the commit before the squash.
const BEFORE_SQUASH: &str = "55e5768";

/// `pg_dump --schema-only` of the database at `url`, without what differs between two dumps of
/// the same schema (the dump's random `\restrict` key).
fn schema_of(url: &str) -> String {
    let out = Command::new("pg_dump").args(["--schema-only", "--no-owner", "--no-privileges", url]).output().expect("pg_dump runs");
    assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `*.sql` file of `dir`, in name order.
pub(crate) fn sql_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "sql")).collect();
    files.sort();
    assert!(!files.is_empty(), "no migration files in {}", dir.display());
    files
}

/// Runs `files` on `url` in order, each in one transaction.
pub(crate) fn apply_files(url: &str, files: &[std::path::PathBuf]) {
    for file in files {
        let out = Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction", "-f"])
            .arg(file)
            .arg(url)
            .output()
            .expect("psql runs");
        assert!(out.status.success(), "{}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    }
}

/// The service's migration files.
pub(crate) fn migrations_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
}

#[tokio::test]
async fn the_migrator_builds_what_the_migration_files_say() {
    let (migrated_url, migrated) = scratch_database("schema_migrated").await;
    let (files_url, files) = scratch_database("schema_files").await;
    Db::connect(&migrated_url, 1, 1, Duration::from_secs(5)).await.expect("the migrations apply to an empty database");
    apply_files(&files_url, &sql_files(migrations_dir()));
    let (by_migrator, by_files) = (schema_of(&migrated_url), schema_of(&files_url));
    drop_scratch_database(&migrated).await;
    drop_scratch_database(&files).await;
    // The migrator's own bookkeeping table is the one difference allowed.
    let by_migrator = without_table(&by_migrator, "schema_migrations");
    assert!(by_migrator == by_files, "the migrator and the migration files disagree:\n{}", first_difference(&by_migrator, &by_files));
}

/// Control: the squashed schema file builds exactly what the migrations it replaced built.
#[tokio::test]
async fn the_squashed_schema_is_the_schema_of_the_migrations_it_replaced() {
    let old = tempdir("seckill-migrations-before-squash");
    let archive = Command::new("git").args(["-C", env!("CARGO_MANIFEST_DIR"), "archive", BEFORE_SQUASH, "migrations"]).output();
    let Some(archive) = archive.ok().filter(|o| o.status.success()) else {
        eprintln!("skipped: commit {BEFORE_SQUASH} is not in this clone");
        return;
    };
    let mut untar = Command::new("tar").args(["-x", "-C"]).arg(&old).stdin(std::process::Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(untar.stdin.as_mut().unwrap(), &archive.stdout).unwrap();
    drop(untar.stdin.take());
    assert!(untar.wait().unwrap().success());
    let (before_url, before) = scratch_database("schema_before_squash").await;
    let (after_url, after) = scratch_database("schema_after_squash").await;
    apply_files(&before_url, &sql_files(&old.join("migrations")));
    // The squash alone: later migrations build on it.
    apply_files(&after_url, &[migrations_dir().join("0001_schema.sql")]);
    let (chain, squashed) = (schema_of(&before_url), schema_of(&after_url));
    drop_scratch_database(&before).await;
    drop_scratch_database(&after).await;
    std::fs::remove_dir_all(&old).unwrap();
    assert_eq!(chain.matches("CREATE FUNCTION").count(), 6, "the chain's functions are all there");
    assert!(chain == squashed, "the squash changed the schema:\n{}", first_difference(&chain, &squashed));
}

fn tempdir(label: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{label}-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `dump` without the `CREATE TABLE` of `table` and its constraints.
fn without_table(dump: &str, table: &str) -> String {
    let blocks: Vec<&str> = dump.split("\n\n").collect();
    blocks
        .into_iter()
        .filter(|b| !b.contains(&format!("public.{table}")) && !b.contains(&format!("Name: {table}")))
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn first_difference(a: &str, b: &str) -> String {
    let (a, b): (Vec<_>, Vec<_>) = (a.lines().collect(), b.lines().collect());
    let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    format!("line {}: {:?} vs {:?}", at + 1, a.get(at), b.get(at))
}
