//! ZooKeeper for the zk:// tests: the shared server's URL (`ZOOKEEPER_URL`), and a server that
//! one test owns so that it can freeze, kill or restart it. An owned server runs ZooKeeper 3.8
//! (Debian's `zookeeper` package, on the JVM) standalone in the foreground on a free loopback
//! port, with a small `tickTime` so that sessions can be short, its data in a temporary
//! directory; it is killed, by its PID, on drop.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

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
    dir: PathBuf,
    child: Option<Child>,
}

impl ZkServer {
    /// Starts a server whose tick is `tick` (sessions may last from 2 to 20 ticks).
    pub(crate) fn start(tick: Duration) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("lockkit-zk-{port}-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let config = format!(
            "tickTime={}\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n4lw.commands.whitelist=srvr\n",
            tick.as_millis(),
            dir.join("data").display(),
        );
        std::fs::write(dir.join("zoo.cfg"), config).unwrap();
        let mut server = Self { port, dir, child: None };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.join("zookeeper.log")).unwrap();
        let child = Command::new("java")
            .args(["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .args(["-cp", "/usr/share/java/*:/etc/zookeeper/conf"])
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(self.dir.join("zoo.cfg"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("java must be installed (Debian's zookeeper package brings it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.answers() {
            let log = std::fs::read_to_string(self.dir.join("zookeeper.log")).unwrap_or_default();
            assert!(Instant::now() < deadline, "zookeeper on port {} did not start:\n{log}", self.port);
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

    /// Sends `signal` to the process; whether it was delivered.
    fn signal(&self, signal: &str) -> bool {
        let Some(child) = &self.child else { return false };
        Command::new("kill").args([signal, &child.id().to_string()]).status().is_ok_and(|s| s.success())
    }

    /// Freezes the process (SIGSTOP): it keeps its sockets but answers nothing.
    pub(crate) fn freeze(&self) {
        assert!(self.signal("-STOP"), "could not freeze zookeeper");
    }

    /// Lets a frozen process go on (SIGCONT).
    pub(crate) fn thaw(&self) {
        assert!(self.signal("-CONT"), "could not thaw zookeeper");
    }

    /// Kills the process (SIGKILL); its data directory stays.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills it and starts it again on the same port with the same data, as after a crash.
    pub(crate) fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Wait on the port, not the process: it may linger a moment after it let go.
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.spawn();
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        // A frozen process dies of SIGKILL too; nothing to thaw first.
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
