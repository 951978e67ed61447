//! Redis servers that one test owns: independent masters for Redlock, and a 3-master Redis
//! Cluster. Each is `redis-server` (installed by `scripts/services.sh`) started through
//! `scripts/server.sh redis run` on a free loopback port (`launched`); the test kills it, by its
//! PID, when done or to inject a fault.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use redis::aio::MultiplexedConnection;

use crate::launched::{self, Launched, free_port, free_port_64xx};

/// One `redis-server` process, killed on drop.
pub(crate) struct RedisServer {
    pub(crate) port: u16,
    process: Launched,
}

impl RedisServer {
    /// Starts a server without persistence on a free port (and, with `--cluster-enabled`, with
    /// its cluster bus port free too).
    pub(crate) async fn start(extra: &[&str]) -> Self {
        Self::start_on(free_port(bus(extra)), extra).await
    }

    /// Starts a server like [`start`](Self::start), on a free port of 6400-6499 (a test's own
    /// server in the range the project leaves to tests).
    pub(crate) async fn start_64xx(extra: &[&str]) -> Self {
        Self::start_on(free_port_64xx(bus(extra)), extra).await
    }

    async fn start_on(port: u16, extra: &[&str]) -> Self {
        let mut server = Self { port, process: launched::spawn("redis", port, extra) };
        server.wait_ready().await;
        server
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.connect().await.is_none() {
            launched::assert_running(&mut self.process);
            assert!(Instant::now() < deadline, "redis-server on port {} did not start", self.port);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`.
    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A plain connection to this server, if it answers.
    pub(crate) async fn connect(&self) -> Option<MultiplexedConnection> {
        let client = redis::Client::open(self.url()).ok()?;
        let mut conn =
            tokio::time::timeout(Duration::from_secs(1), client.get_multiplexed_async_connection()).await.ok()?.ok()?;
        let _: () = redis::cmd("PING").query_async(&mut conn).await.ok()?;
        Some(conn)
    }

    /// A plain connection; panics if the server does not answer.
    pub(crate) async fn conn(&self) -> MultiplexedConnection {
        self.connect().await.unwrap_or_else(|| panic!("redis-server on port {} does not answer", self.port))
    }

    /// Kills the process (SIGKILL): its data is gone.
    pub(crate) fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts it again on the same port, empty (no persistence), as after a crash.
    pub(crate) async fn restart_empty(&mut self) {
        self.process.kill();
        self.process.respawn().unwrap();
        self.wait_ready().await;
    }
}

/// The ports beside a server's own that must be free too: a cluster node's bus port (+10000).
fn bus(extra: &[&str]) -> &'static [u16] {
    if extra.contains(&"--cluster-enabled") { &[10000] } else { &[] }
}

/// `n` independent masters, and a Redlock URL over them.
pub(crate) struct Masters {
    pub(crate) nodes: Vec<RedisServer>,
}

impl Masters {
    pub(crate) async fn start(n: usize) -> Self {
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(RedisServer::start(&[]).await);
        }
        Self { nodes }
    }

    /// `redlock://` over the nodes at `indexes`.
    pub(crate) fn url_of(&self, indexes: &[usize]) -> String {
        let hosts: Vec<String> = indexes.iter().map(|&i| self.nodes[i].address()).collect();
        format!("redlock://{}", hosts.join(","))
    }

    /// `redlock://` over every node.
    pub(crate) fn url(&self) -> String {
        self.url_of(&(0..self.nodes.len()).collect::<Vec<_>>())
    }
}

/// A 3-master Redis Cluster without replicas.
pub(crate) struct Cluster {
    pub(crate) nodes: Vec<RedisServer>,
}

impl Cluster {
    pub(crate) async fn start() -> Self {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(RedisServer::start(&["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"]).await);
        }
        Self::create(nodes).await
    }

    /// A cluster of 3 masters on ports of 6400-6499, each started with `extra` too.
    pub(crate) async fn start_64xx(extra: &[&str]) -> Self {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            let args = [&["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"], extra].concat();
            nodes.push(RedisServer::start_64xx(&args).await);
        }
        Self::create(nodes).await
    }

    async fn create(nodes: Vec<RedisServer>) -> Self {
        // Bounded: `--cluster create` waits for the nodes to meet with no limit of its own.
        let status = Command::new("timeout")
            .args(["60", "redis-cli"])
            .arg("--cluster")
            .arg("create")
            .args(nodes.iter().map(RedisServer::address))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("timeout and redis-cli must be installed");
        assert!(status.success(), "redis-cli --cluster create failed or did not finish within 60 s");
        let cluster = Self { nodes };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cluster.is_ok().await {
            assert!(Instant::now() < deadline, "the cluster did not reach state ok");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cluster
    }

    async fn is_ok(&self) -> bool {
        for node in &self.nodes {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query_async(&mut node.conn().await).await.unwrap();
            if !info.contains("cluster_state:ok") {
                return false;
            }
        }
        true
    }

    /// `redis+cluster://` over every node.
    pub(crate) fn url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(RedisServer::address).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The node whose data holds `key`.
    pub(crate) async fn node_holding(&self, key: &str) -> Option<usize> {
        for (i, node) in self.nodes.iter().enumerate() {
            let mut conn = node.conn().await;
            // READONLY-free check: a master answers EXISTS for its own slots and MOVED otherwise.
            if let Ok(true) = redis::cmd("EXISTS").arg(key).query_async::<bool>(&mut conn).await {
                return Some(i);
            }
        }
        None
    }

    /// The cluster node id of node `i`.
    pub(crate) async fn node_id(&self, i: usize) -> String {
        redis::cmd("CLUSTER").arg("MYID").query_async(&mut self.nodes[i].conn().await).await.unwrap()
    }

    /// Moves `slot` (with its keys) from node `from` to node `to`, the way `redis-cli --cluster
    /// reshard` does: IMPORTING/MIGRATING, `MIGRATE` of each key, then `SETSLOT NODE` everywhere.
    pub(crate) async fn migrate_slot(&self, slot: u16, from: usize, to: usize) {
        let (from_id, to_id) = (self.node_id(from).await, self.node_id(to).await);
        let mut source = self.nodes[from].conn().await;
        let mut target = self.nodes[to].conn().await;
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("IMPORTING")
            .arg(&from_id)
            .query_async(&mut target)
            .await
            .unwrap();
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&to_id)
            .query_async(&mut source)
            .await
            .unwrap();
        loop {
            let keys: Vec<String> =
                redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(100).query_async(&mut source).await.unwrap();
            if keys.is_empty() {
                break;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate.arg("127.0.0.1").arg(self.nodes[to].port).arg("").arg(0).arg(5000).arg("KEYS").arg(&keys);
            let _: redis::Value = migrate.query_async(&mut source).await.unwrap();
        }
        for node in &self.nodes {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&to_id)
                .query_async(&mut node.conn().await)
                .await
                .unwrap();
        }
    }
}
