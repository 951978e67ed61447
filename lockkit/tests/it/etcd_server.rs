//! etcd for the etcd tests: the shared server's URL (`ETCD_URL`, started by
//! `WITH=etcd scripts/services.sh up`), an `etcdctl` runner, and a server that one test owns
//! (Debian's `etcd` started through `scripts/server.sh etcd run` on free loopback ports with a
//! temporary data dir, killed by its PID on drop) for the faults that would disturb other tests:
//! freezing it, killing it, restarting it.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use crate::launched::{self, Launched, free_port};

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

/// One `etcd` process (`scripts/server.sh etcd run`, `launched`), killed on drop; its data
/// survives a [`restart`](Self::restart).
pub(crate) struct EtcdServer {
    port: u16,
    process: Launched,
}

impl EtcdServer {
    pub(crate) async fn start() -> Self {
        // Its peers listen on the next port.
        let port = free_port(&[1]);
        let mut server = Self { port, process: launched::spawn("etcd", port, &[]) };
        server.wait_ready().await;
        server
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.answers().await {
            launched::assert_running(&mut self.process);
            assert!(Instant::now() < deadline, "etcd on port {} did not start:\n{}", self.port, self.process.log());
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

    /// Freezes the process (SIGSTOP): connections stay open, nothing is answered.
    pub(crate) fn freeze(&self) {
        self.process.freeze().expect("freeze etcd");
    }

    /// Resumes a frozen process (SIGCONT).
    pub(crate) fn resume(&self) {
        self.process.thaw().expect("resume etcd");
    }

    /// Kills it and starts it again on the same ports with the same data, as after a crash.
    pub(crate) async fn restart(&mut self) {
        self.process.kill();
        self.process.respawn().unwrap();
        self.wait_ready().await;
    }
}
