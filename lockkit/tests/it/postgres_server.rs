//! A PostgreSQL server that one test owns, to crash and restart it, started and stopped the
//! project's one way (`scripts/server.sh postgres`, see `scripts/lib/pg.sh`): `initdb` in a
//! temporary directory, `pg_ctl` on a free loopback port, trust auth for user `seckill` and
//! database `seckill` (like `scripts/services.sh`), as the `postgres` user when we are root.
//! Crashed (`pg_ctl stop -m immediate`) and deleted on drop. Also the shared server's URL
//! (`DATABASE_URL`), for the tests that need no server of their own.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use launch::Server;

use crate::launched::{free_port, temp_dir};

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

impl PgServer {
    /// Initialises a cluster in a temporary directory and starts it on a free port, with its
    /// database `seckill`.
    pub(crate) async fn start() -> Self {
        let port = free_port(&[]);
        let mut server = Self { port, dir: temp_dir("postgres", port), running: false };
        server.script("start", &["seckill"]).unwrap_or_else(|e| panic!("{e}"));
        server.running = true;
        server
    }

    /// `scripts/server.sh postgres ACTION DIR PORT ARG...`; its output if it fails.
    fn script(&self, action: &str, args: &[&str]) -> Result<(), String> {
        let args: Vec<String> =
            std::iter::once(self.port.to_string()).chain(args.iter().map(|a| a.to_string())).collect();
        let server = Server::new("postgres", &self.dir).args(args);
        let out = server
            .command(action)
            .and_then(|mut c| c.stderr(std::process::Stdio::piped()).output())
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "scripts/server.sh postgres {action} on port {} failed (PostgreSQL must be installed: \
             scripts/services.sh installs it):\n{}",
            self.port,
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    /// `postgres://seckill@127.0.0.1:PORT/seckill`.
    pub(crate) fn url(&self) -> String {
        format!("postgres://seckill@127.0.0.1:{}/seckill", self.port)
    }

    /// Stops it at once, like a crash (`pg_ctl stop -m immediate`): sessions end, data stays.
    pub(crate) fn crash(&mut self) {
        if self.running {
            // A failure here would also fail the restart that follows, which says why.
            let _ = self.script("stop", &["immediate"]);
            self.running = false;
        }
    }

    /// Starts it again (after a crash: with crash recovery) and waits until it answers.
    pub(crate) async fn resume(&mut self) {
        self.script("start", &[]).unwrap_or_else(|e| panic!("{e}"));
        self.running = true;
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio_postgres::connect(&self.url(), tokio_postgres::NoTls).await.is_err() {
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
