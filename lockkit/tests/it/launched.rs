//! A server that one test owns, started the project's one way: `scripts/server.sh KIND run DIR
//! ARG...`, whose `scripts/lib/KIND.sh` holds the server's command line (nothing here writes
//! one). `run` execs the server, so the child the test spawned is the server itself: the test
//! freezes, thaws and kills it by that PID. Its files (data, configuration, `KIND.log`,
//! `KIND.pid`, `KIND.addr`) live in a temporary directory, removed with the process on drop.
//! Also [`server_script`] for the servers that daemonise (PostgreSQL) and the free-port pickers.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

/// `bash scripts/server.sh KIND ACTION DIR ARG...`, its standard streams not yet set.
pub(crate) fn server_script(kind: &str, action: &str, dir: &Path, args: &[String]) -> Command {
    let mut command = Command::new("bash");
    command
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/server.sh"))
        .args([kind, action])
        .arg(dir)
        .args(args)
        .stdin(Stdio::null());
    command
}

/// A fresh temporary directory for one test's server of `kind` on `port`.
pub(crate) fn temp_dir(kind: &str, port: u16) -> PathBuf {
    std::env::temp_dir().join(format!("lockkit-it-{kind}-{port}-{:08x}", rand::random::<u32>()))
}

/// One server process of `kind`, killed (SIGKILL) and its directory removed on drop.
pub(crate) struct Launched {
    kind: &'static str,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl Launched {
    /// Starts `scripts/server.sh KIND run DIR ARG...` in a new temporary directory named after
    /// `port`. It returns at once: readiness is the caller's to judge (each kind answers its own
    /// probe).
    pub(crate) fn spawn(kind: &'static str, port: u16, args: &[String]) -> Self {
        let mut server = Self { kind, dir: temp_dir(kind, port), args: args.to_vec(), child: None };
        server.respawn();
        server
    }

    /// Starts it again with the same arguments and directory (after [`kill`](Self::kill): the
    /// data a kind keeps on disk survives, as after a crash).
    pub(crate) fn respawn(&mut self) {
        assert!(self.child.is_none(), "{} is still running", self.kind);
        let child = server_script(self.kind, "run", &self.dir, &self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {} through scripts/server.sh: {e}", self.kind));
        self.child = Some(child);
    }

    /// Its log so far (`DIR/KIND.log`), for a failure message.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("{}.log", self.kind))).unwrap_or_default()
    }

    /// Panics with the log if the process has exited (a server that failed to start).
    pub(crate) fn assert_running(&mut self) {
        let child = self.child.as_mut().expect("started");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{} exited during start-up ({status}):\n{}", self.kind, self.log());
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        assert!(Command::new("kill").args([signal, &pid]).status().unwrap().success(), "kill {signal} {pid}");
    }

    /// Freezes the process (SIGSTOP): it keeps its sockets but answers nothing.
    pub(crate) fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen process go on (SIGCONT).
    pub(crate) fn thaw(&self) {
        self.signal("-CONT");
    }

    /// Kills the process (SIGKILL, which ends a frozen one too) and reaps it; its directory stays.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port that nothing listens on now, and none on `port + offset` for each of
/// `offsets` either (a cluster node's bus port, etcd's peer port).
pub(crate) fn free_port(offsets: &[u16]) -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if free_beside(port, offsets) {
            return port;
        }
    }
}

/// Like [`free_port`], among 6400-6499 (the range the project leaves to a test's own servers).
pub(crate) fn free_port_64xx(offsets: &[u16]) -> u16 {
    loop {
        let port = 6400 + rand::random::<u16>() % 100;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() && free_beside(port, offsets) {
            return port;
        }
    }
}

fn free_beside(port: u16, offsets: &[u16]) -> bool {
    offsets.iter().all(|&offset| port.checked_add(offset).is_some_and(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()))
}
