//! One URL per backend: the same code takes a lock on each, and only the URL changes.
//!
//! Give the URLs as arguments, or let the example read `REDIS_URL`, `LOCKKIT_REDLOCK_URL` and
//! `LOCKKIT_CLUSTER_URL` (what the repository's `scripts/lock-servers.sh env` prints),
//! `ZOOKEEPER_URL`, `ETCD_URL` and `DATABASE_URL` (the last one as both `postgres://` and
//! `postgres+advisory://`); unset ones are skipped. A backend whose feature was
//! not built is refused at connect, with the feature's name in the error.
//!
//! Run: `cargo run -p lockkit --all-features --example backends -- redis://127.0.0.1:6390 \
//! zk://127.0.0.1:2191/lockkit etcd://127.0.0.1:2389 postgres://seckill@127.0.0.1:5440/seckill`
//!
//! URL forms (details on each backend's page under `lockkit::guide`):
//! - `redis://[user:password@]host:port[/db]`, `rediss://` with the `tls` feature
//! - `redis+cluster://host:port,host:port,...` (seed nodes)
//! - `redlock://host:port,host:port,host:port` (independent masters, at least 3)
//! - `zk://[user:password@]host:port[,host:port...][/chroot]` (feature `zookeeper`)
//! - `etcd://[user:password@]host:port,...` (feature `etcd`)
//! - `postgres://user@host:port/db` and `postgres+advisory://user@host:port/db` (feature
//!   `postgres`)

use std::time::Duration;

use lockkit::LockClient;

/// The URLs to try: the arguments, or else the environment.
fn urls() -> Vec<String> {
    let given: Vec<String> = std::env::args().skip(1).collect();
    if !given.is_empty() {
        return given;
    }
    let env = |name: &str| std::env::var(name).ok();
    let mut urls: Vec<String> =
        ["REDIS_URL", "LOCKKIT_REDLOCK_URL", "LOCKKIT_CLUSTER_URL", "ZOOKEEPER_URL", "ETCD_URL"]
            .into_iter()
            .filter_map(env)
            .collect();
    if let Some(database) = env("DATABASE_URL") {
        urls.push(database.replacen("postgres://", "postgres+advisory://", 1));
        urls.push(database);
    }
    urls
}

/// Connects to `url`, takes a lock under it and releases it; returns what happened.
async fn try_backend(url: &str, name: &str) -> lockkit::Result<String> {
    let client = LockClient::connect(url).await?;
    let backend = client.backend();
    let fence = client.with_lock(name, Duration::from_secs(5), |fence| async move { fence }).await?;
    Ok(format!("{backend}: held {name} with fence {fence}, released"))
}

#[tokio::main]
async fn main() {
    let urls = urls();
    if urls.is_empty() {
        eprintln!("no URL given: pass URLs as arguments, or set REDIS_URL, ZOOKEEPER_URL, ETCD_URL, DATABASE_URL, ...");
        std::process::exit(2);
    }
    let name = format!("examples:backends:{:08x}", rand::random::<u32>());
    let mut failed = false;
    for url in &urls {
        match try_backend(url, &name).await {
            Ok(line) => println!("{url}\n  {line}"),
            Err(e) => {
                failed = true;
                println!("{url}\n  failed: {e}");
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}
