//! A Sentinel deployment that one test owns: a master, one replica and three Sentinels (quorum
//! 2), each a `redis-server` on a free loopback port of 64xx started through `scripts/server.sh`
//! (see `servers`), and the two faults the Sentinel tests need: a grant the replica never got,
//! and a forced failover.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::servers::RedisServer;

/// The name the Sentinels monitor the master under.
pub(crate) const SERVICE: &str = "lockkit-it";

pub(crate) struct SentinelSet {
    pub(crate) master: RedisServer,
    pub(crate) replica: RedisServer,
    sentinels: Vec<RedisServer>,
}

impl SentinelSet {
    /// Starts the servers and waits until the replica is in sync and every Sentinel knows the
    /// replica and the other Sentinels (a failover needs both).
    pub(crate) async fn start() -> Self {
        let master = RedisServer::start_64xx(&[]).await;
        let master_port = master.port.to_string();
        let replica = RedisServer::start_64xx(&["--replicaof", "127.0.0.1", &master_port]).await;
        until("the replica to sync", async || info(&mut replica.conn().await, "master_link_status").await == "up")
            .await;
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            // down-after 1 s and failover-timeout 5 s: a lost master is noticed and replaced in seconds.
            sentinels.push(RedisServer::start_64xx(&["--sentinel", SERVICE, &master_port, "2", "1000", "5000"]).await);
        }
        for sentinel in &sentinels {
            until("the Sentinels to know the replica and each other", async || {
                let fields = sentinel_master(&mut sentinel.conn().await).await;
                fields.get("num-slaves").map(String::as_str) == Some("1")
                    && fields.get("num-other-sentinels").map(String::as_str) == Some("2")
            })
            .await;
        }
        Self { master, replica, sentinels }
    }

    /// `redis+sentinel://` over the three Sentinels.
    pub(crate) fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(RedisServer::address).collect();
        format!("redis+sentinel://{}/{SERVICE}", hosts.join(","))
    }

    /// Makes the replica look as if it never received the grant of `lock_key` (whose counter is
    /// `fence_key`): what asynchronous replication leaves behind when the master acknowledged a
    /// grant and failed over before passing it on. First waits until the replica has everything,
    /// then undoes the grant's two writes there (`SET` of the lock, `INCR` of the counter), on
    /// the replica alone.
    pub(crate) async fn lose_on_replica(&self, lock_key: &str, fence_key: &str) {
        let acked: i64 =
            redis::cmd("WAIT").arg(1).arg(10_000).query_async(&mut self.master.conn().await).await.unwrap();
        assert_eq!(acked, 1, "the replica must have the grant before it is taken back");
        let mut replica = self.replica.conn().await;
        let set = |value: &str| redis::cmd("CONFIG").arg("SET").arg("replica-read-only").arg(value).clone();
        let () = set("no").query_async(&mut replica).await.unwrap();
        let () = redis::cmd("DEL").arg(lock_key).query_async(&mut replica).await.unwrap();
        let () = redis::cmd("DECR").arg(fence_key).query_async(&mut replica).await.unwrap();
        let () = set("yes").query_async(&mut replica).await.unwrap();
    }

    /// `SENTINEL FAILOVER`, then waits until every Sentinel names the replica as the master.
    pub(crate) async fn failover(&self) {
        until("SENTINEL FAILOVER to be accepted", async || {
            redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(SERVICE)
                .query_async::<()>(&mut self.sentinels[0].conn().await)
                .await
                .is_ok()
        })
        .await;
        let promoted = self.replica.port.to_string();
        for sentinel in &self.sentinels {
            until("every Sentinel to name the promoted replica", async || {
                sentinel_master(&mut sentinel.conn().await).await.get("port") == Some(&promoted)
            })
            .await;
        }
    }
}

/// `SENTINEL MASTER` of [`SERVICE`], as a map.
async fn sentinel_master(sentinel: &mut MultiplexedConnection) -> std::collections::HashMap<String, String> {
    redis::cmd("SENTINEL").arg("MASTER").arg(SERVICE).query_async(sentinel).await.unwrap_or_default()
}

/// One field of `INFO replication`.
async fn info(conn: &mut MultiplexedConnection, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg("replication").query_async(conn).await.unwrap();
    info.lines().find_map(|line| line.strip_prefix(&format!("{field}:"))).unwrap_or_default().trim().to_owned()
}

/// Waits for a condition of the set-up (not of the behaviour under test); 60 s means it is broken.
async fn until(what: &str, check: impl AsyncFn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(Instant::now() < deadline, "waited 60 s for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
