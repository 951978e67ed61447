//! ZooKeeper for the zk:// tests: the shared server's URL (`ZOOKEEPER_URL`), and a server that
//! one test owns so that it can freeze, kill or restart it: ZooKeeper 3.8 (Debian's `zookeeper`
//! package, on the JVM) started through `scripts/server.sh zookeeper run` (`launched`) on a free
//! loopback port, with a small `tickTime` so that sessions can be short, its data in a temporary
//! directory; it is killed, by its PID, on drop.

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

use crate::launched::{self, Launched, free_port};
/// The shared ZooKeeper of the test run.
pub(crate) fn zookeeper_url() -> String {
    std::env::var("ZOOKEEPER_URL").unwrap_or_else(|_| {
        panic!(
            "ZOOKEEPER_URL is unset: start the shared ZooKeeper with `WITH=zookeeper scripts/services.sh up` \
             and export the ZOOKEEPER_URL it prints (e.g. zk://127.0.0.1:2191/lockkit)"
        )
    })
}

/// `host:port` and chroot of a `zk://` URL.
pub(crate) fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("zk://").expect("a zk:// URL");
    match rest.split_once('/') {
        Some((hosts, chroot)) => (hosts.to_owned(), format!("/{}", chroot.trim_matches('/'))),
        None => (rest.to_owned(), String::new()),
    }
}

/// One ZooKeeper server process, killed on drop.
pub(crate) struct ZkServer {
    pub(crate) port: u16,
    process: Launched,
}

impl ZkServer {
    /// Starts a server whose tick is `tick` (sessions may last from 2 to 20 ticks).
    pub(crate) fn start(tick: Duration) -> Self {
        let port = free_port(&[]);
        let process = launched::spawn("zookeeper", port, &[&tick.as_millis().to_string()]);
        let mut server = Self { port, process };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.answers() {
            launched::assert_running(&mut self.process);
            assert!(
                Instant::now() < deadline,
                "zookeeper on port {} did not start:\n{}",
                self.port,
                self.process.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether the four-letter word `srvr` gets an answer.
    fn answers(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut reply = String::new();
        stream.write_all(b"srvr").is_ok() && stream.read_to_string(&mut reply).is_ok() && reply.contains("Mode:")
    }

    /// `zk://127.0.0.1:PORT/CHROOT`.
    pub(crate) fn url(&self, chroot: &str) -> String {
        format!("zk://127.0.0.1:{}/{}", self.port, chroot.trim_matches('/'))
    }

    /// Freezes the process (SIGSTOP): it keeps its sockets but answers nothing.
    pub(crate) fn freeze(&self) {
        self.process.freeze().expect("freeze zookeeper");
    }

    /// Lets a frozen process go on (SIGCONT).
    pub(crate) fn thaw(&self) {
        self.process.thaw().expect("thaw zookeeper");
    }

    /// Kills it and starts it again on the same port with the same data, as after a crash.
    pub(crate) fn restart(&mut self) {
        self.process.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Wait on the port, not the process: it may linger a moment after it let go.
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.process.respawn().unwrap();
        self.wait_ready();
    }
}
