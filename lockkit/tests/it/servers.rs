//! Redis servers that one test owns: independent masters for Redlock, and a 3-master Redis
//! Cluster. Each runs `redis-server` (installed by `scripts/services.sh`) in the foreground through
//! `scripts/server.sh redis run` on a free loopback port, with its files in a temporary directory;
//! the test kills it, by its PID, when done or to inject a fault.

use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use redis::aio::MultiplexedConnection;

/// One `redis-server` process, killed on drop.
pub(crate) struct RedisServer {
    pub(crate) port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server without persistence on a free port (and, with `extra` cluster flags, with
    /// its cluster bus port free too).
    pub(crate) async fn start(extra: &[&str]) -> Self {
        Self::start_on(free_port(!extra.is_empty()), extra).await
    }

    /// Starts a server like [`start`](Self::start), on a free port of 6400-6499 (a test's own
    /// server in the range the project leaves to tests).
    pub(crate) async fn start_64xx(extra: &[&str]) -> Self {
        Self::start_on(free_port_64xx(!extra.is_empty()), extra).await
    }

    async fn start_on(port: u16, extra: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("lockkit-it-{port}-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = Self { port, dir, extra: extra.iter().map(|s| s.to_string()).collect(), child: None };
        server.spawn().await;
        server
    }

    async fn spawn(&mut self) {
        // The project's one way to start Redis; `run` execs it, so the child is the server.
        let child = Command::new("bash")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/server.sh"))
            .args(["redis", "run"])
            .arg(&self.dir)
            .arg(self.port.to_string())
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/services.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.connect().await.is_none() {
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
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty (no persistence), as after a crash.
    pub(crate) async fn restart_empty(&mut self) {
        self.kill();
        self.spawn().await;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port that nothing listens on now (and, for cluster nodes, whose bus port +10000 is free).
fn free_port(with_bus: bool) -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        if !with_bus || (port < 55535 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok()) {
            return port;
        }
    }
}

/// A port of 6400-6499, picked at random, that nothing listens on now (and, for cluster nodes,
/// whose bus port +10000 is free).
fn free_port_64xx(with_bus: bool) -> u16 {
    loop {
        let port = 6400 + rand::random::<u16>() % 100;
        if TcpListener::bind(("127.0.0.1", port)).is_ok()
            && (!with_bus || TcpListener::bind(("127.0.0.1", port + 10000)).is_ok())
        {
            return port;
        }
    }
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
