//! etcd for the etcd tests: the shared server's URL (`ETCD_URL`, started by
//! `WITH=etcd scripts/services.sh up`), an `etcdctl` runner, and a server that one test owns
//! (Debian's `etcd` on free loopback ports with a temporary data dir, killed by its PID on drop)
//! for the faults that would disturb other tests: freezing it, killing it, restarting it.

use std::{
    io::{BufRead, BufReader},
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

/// The shared etcd (`etcd://host:port`). Unset: the tests fail, saying how to start it.
pub(crate) fn etcd_url() -> String {
    std::env::var("ETCD_URL").unwrap_or_else(|_| {
        panic!(
            "ETCD_URL is not set: start etcd with `WITH=etcd scripts/services.sh up` (or `make test`, which does) \
             and export the ETCD_URL it prints, e.g. ETCD_URL=etcd://127.0.0.1:2389"
        )
    })
}

/// `http://host:port` of an `etcd://host:port` URL, as `etcdctl --endpoints` takes it.
pub(crate) fn endpoint(url: &str) -> String {
    format!("http://{}", url.trim_start_matches("etcd://").split(',').next().unwrap())
}

/// `etcdctl` (API v3) against the etcd of `url`.
pub(crate) fn etcdctl(url: &str) -> Command {
    let mut command = Command::new("etcdctl");
    command.env("ETCDCTL_API", "3").arg("--endpoints").arg(endpoint(url));
    command
}

/// Runs `etcdctl ARGS` to completion; panics if it fails.
pub(crate) fn etcdctl_ok(url: &str, args: &[&str]) -> Output {
    let out = etcdctl(url).args(args).output().expect("etcdctl must be installed (Debian etcd-client)");
    assert!(out.status.success(), "etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The exit status of `child` if it exits within `within` (killed otherwise).
pub(crate) fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `etcdctl lock NAME -- sh -c 'echo held; sleep SECS'` and returns once it holds.
pub(crate) fn etcdctl_holding(url: &str, name: &str, secs: u32) -> Child {
    let mut child = etcdctl(url)
        .args(["lock", name, "--", "sh", "-c", &format!("echo held; sleep {secs}")])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "held");
    child
}

/// The keys under `NAME/` (the lock's contenders), oldest first.
pub(crate) fn contender_keys(url: &str, name: &str) -> Vec<String> {
    let out = etcdctl_ok(url, &["get", "--prefix", &format!("{name}/"), "--keys-only", "--sort-by=CREATE"]);
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

/// One `etcd` process, killed on drop; its data survives a [`restart`](Self::restart).
pub(crate) struct EtcdServer {
    port: u16,
    peer_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl EtcdServer {
    pub(crate) async fn start() -> Self {
        let (port, peer_port) = free_ports();
        let dir = std::env::temp_dir().join(format!("lockkit-it-etcd-{port}-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = Self { port, peer_port, dir, child: None };
        server.spawn().await;
        server
    }

    async fn spawn(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new("etcd")
            .args(["--name", "it", "--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .arg("--initial-cluster")
            .arg(format!("it={peer}"))
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd must be installed (Debian etcd-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.answers().await {
            assert!(Instant::now() < deadline, "etcd on port {} did not start", self.port);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether it answers a status request within a second.
    async fn answers(&self) -> bool {
        let status = async {
            let mut client = etcd_client::Client::connect([endpoint(&self.url())], None).await?;
            client.status().await
        };
        matches!(tokio::time::timeout(Duration::from_secs(1), status).await, Ok(Ok(_)))
    }

    /// `etcd://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        assert!(Command::new("kill").args([signal, &pid]).status().unwrap().success());
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing is answered.
    pub(crate) fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Resumes a frozen process (SIGCONT).
    pub(crate) fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the process (SIGKILL); its data dir stays.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills it and starts it again on the same ports with the same data, as after a crash.
    pub(crate) async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        // SIGKILL ends a frozen process too.
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Two distinct loopback ports that nothing listens on now.
fn free_ports() -> (u16, u16) {
    let (a, b) = (TcpListener::bind("127.0.0.1:0").unwrap(), TcpListener::bind("127.0.0.1:0").unwrap());
    (a.local_addr().unwrap().port(), b.local_addr().unwrap().port())
}
