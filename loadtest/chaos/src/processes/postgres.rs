//! The suite's own PostgreSQL under `.run/chaos/pg/`, started and stopped the project's one way
//! (`scripts/server.sh postgres` through the `launch` crate, see `scripts/lib/pg.sh`): `initdb` once, as the `postgres` user
//! when we are root, then `pg_ctl` (`-m fast` to stop). Its PID comes from `postmaster.pid`.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use launch::Server;

use super::{PidFiles, port_open, wait_until};

/// Superuser created by `initdb -U` (`PG_SUPERUSER` in `scripts/lib/pg.sh`), with trust
/// authentication on loopback.
const SUPERUSER: &str = "seckill";

/// Name of the pid file of the suite's PostgreSQL.
const PID_NAME: &str = "postgres";

/// A PostgreSQL server the suite owns.
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    dir: PathBuf,
    pids: PidFiles,
    running: bool,
}

impl PostgresServer {
    /// Initialises `dir/data` if needed (once; later runs reuse it) and starts the server on `port`.
    pub async fn start(port: u16, dir: &Path, pids: &PidFiles) -> Result<Self> {
        if port_open(port).await {
            bail!("port {port} is already in use; stop what listens there or set --pg-port");
        }
        let mut server = Self {
            port,
            dir: dir.to_owned(),
            pids: pids.clone(),
            running: false,
        };
        server.start_server().await?;
        Ok(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    async fn start_server(&mut self) -> Result<()> {
        self.script("start").await.context("start postgres")?;
        self.running = true;
        if let Some(pid) = self.pid() {
            self.pids.record(PID_NAME, pid, "postgres");
        }
        let url = self.url("postgres");
        wait_until(Duration::from_secs(30), "postgres accepts queries", || {
            ping(&url)
        })
        .await
    }

    /// `pg_ctl -m fast stop`: aborts open transactions, disconnects every client, checkpoints.
    pub async fn stop_fast(&mut self) -> Result<()> {
        if !self.running {
            return Ok(());
        }
        self.script("stop").await.context("stop postgres")?;
        self.running = false;
        self.pids.forget(PID_NAME);
        Ok(())
    }

    /// `scripts/server.sh postgres ACTION DIR PORT` to completion; an error quotes its output.
    async fn script(&self, action: &str) -> Result<()> {
        let mut command = tokio::process::Command::from(self.server().command(action)?);
        let output = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .await
            .with_context(|| format!("run {command:?}"))?;
        if !output.status.success() {
            bail!(
                "{command:?} failed ({}):\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    fn server(&self) -> Server {
        Server::new("postgres", &self.dir).arg(self.port.to_string())
    }

    /// Starts it again after [`stop_fast`](Self::stop_fast).
    pub async fn restart(&mut self) -> Result<()> {
        if self.running {
            bail!("postgres is already running");
        }
        self.start_server().await
    }

    /// Whether the suite currently runs it.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// The postmaster's PID, from `postmaster.pid`.
    pub fn pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// The current size of the server log: pass it to [`log_lines_since`](Self::log_lines_since).
    pub fn log_position(&self) -> u64 {
        std::fs::metadata(self.dir.join("pg.log"))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// Server log lines written after `position` that contain any of `needles` and none of
    /// `except` (at most `limit`), prefixed with `postgres: `.
    pub fn log_lines_since(
        &self,
        position: u64,
        needles: &[&str],
        except: &[&str],
        limit: usize,
    ) -> Vec<String> {
        let bytes = std::fs::read(self.dir.join("pg.log")).unwrap_or_default();
        let start = usize::try_from(position)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        String::from_utf8_lossy(&bytes[start..])
            .lines()
            .filter(|l| {
                needles.iter().any(|n| l.contains(n)) && !except.iter().any(|e| l.contains(e))
            })
            .take(limit)
            .map(|l| format!("postgres: {l}"))
            .collect()
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` as the superuser.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{db}", self.port)
    }

    /// Drops (disconnecting its users) and creates database `db`, so each suite run starts clean.
    pub async fn recreate_database(&self, db: &str) -> Result<()> {
        let client = connect(&self.url("postgres")).await?;
        client
            .batch_execute(&format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)"))
            .await?;
        client
            .batch_execute(&format!("CREATE DATABASE \"{db}\" OWNER \"{SUPERUSER}\""))
            .await?;
        Ok(())
    }
}

impl Drop for PostgresServer {
    /// A suite that ends early (an error, a signal) still stops its PostgreSQL: `pg_ctl` daemonises
    /// the server, so no `kill_on_drop` covers it.
    fn drop(&mut self) {
        if !self.running {
            return;
        }
        if let Ok(mut command) = self.server().command("stop") {
            let _ = command.status();
        }
        self.pids.forget(PID_NAME);
    }
}

/// A direct connection to PostgreSQL, for what only the database can tell.
pub async fn connect(url: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_postgres::connect(url, tokio_postgres::NoTls),
    )
    .await
    .context("connect to postgres: timed out")?
    .with_context(|| format!("connect to {url}"))?;
    tokio::spawn(connection);
    Ok(client)
}

/// Whether PostgreSQL at `url` answers a query.
pub async fn ping(url: &str) -> bool {
    match connect(url).await {
        Ok(client) => client.simple_query("SELECT 1").await.is_ok(),
        Err(_) => false,
    }
}
