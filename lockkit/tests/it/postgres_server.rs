//! A PostgreSQL 15 server that one test owns, to stop and restart it: `initdb` in a temporary
//! directory, `pg_ctl` on a free loopback port, trust auth for user `seckill` and database
//! `seckill` (like `scripts/services.sh`). PostgreSQL refuses to run as root, so as root the
//! commands run as the `postgres` user. Stopped (`-m immediate`) and deleted on drop. Also the
//! shared server's URL (`DATABASE_URL`), for the tests that need no server of their own.

use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// One `postgres` server, stopped on drop.
pub(crate) struct PgServer {
    pub(crate) port: u16,
    dir: PathBuf,
    running: bool,
}

/// The shared server's URL; CI exports it.
pub(crate) fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "DATABASE_URL is unset: start PostgreSQL with `scripts/services.sh` (make services) and export \
             DATABASE_URL=postgres://seckill@127.0.0.1:5440/seckill"
        )
    })
}

fn as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Runs a PostgreSQL program (as the `postgres` user when we are root).
fn pg(program: &str, args: &[&str]) -> bool {
    let path = format!("{BIN}/{program}");
    let mut command = if as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", &path]);
        c
    } else {
        Command::new(&path)
    };
    command.args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

impl PgServer {
    /// Initialises a cluster in a temporary directory and starts it on a free port.
    pub(crate) async fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("lockkit-pg-{port}-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).unwrap();
        if as_root() {
            assert!(Command::new("chown").arg("postgres:postgres").arg(&dir).status().unwrap().success());
        }
        let data = dir.join("data");
        assert!(
            pg("initdb", &["-D", data.to_str().unwrap(), "-U", "seckill", "--auth=trust", "-E", "UTF8", "--no-sync"]),
            "initdb failed (PostgreSQL 15 must be installed: scripts/services.sh installs it)"
        );
        let mut server = Self { port, dir, running: false };
        server.resume().await;
        assert!(pg("createdb", &["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "seckill", "seckill"]));
        server
    }

    fn data(&self) -> String {
        self.dir.join("data").to_str().unwrap().to_owned()
    }

    /// `postgres://seckill@127.0.0.1:PORT/seckill`.
    pub(crate) fn url(&self) -> String {
        format!("postgres://seckill@127.0.0.1:{}/seckill", self.port)
    }

    /// Stops it at once, like a crash (`pg_ctl stop -m immediate`): sessions end, data stays.
    pub(crate) fn crash(&mut self) {
        if self.running {
            pg("pg_ctl", &["-D", &self.data(), "-m", "immediate", "-w", "stop"]);
            self.running = false;
        }
    }

    /// Starts it again (after a crash: with crash recovery) and waits until it answers.
    pub(crate) async fn resume(&mut self) {
        let options = format!("-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off", self.port, self.dir.display());
        let log = self.dir.join("log");
        assert!(
            pg("pg_ctl", &["-D", &self.data(), "-l", log.to_str().unwrap(), "-w", "-o", &options, "start"]),
            "pg_ctl start failed on port {}",
            self.port
        );
        self.running = true;
        let deadline = Instant::now() + Duration::from_secs(20);
        let maintenance = format!("postgres://seckill@127.0.0.1:{}/postgres", self.port);
        while tokio_postgres::connect(&maintenance, tokio_postgres::NoTls).await.is_err() {
            assert!(Instant::now() < deadline, "postgres on port {} did not start", self.port);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.crash();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
