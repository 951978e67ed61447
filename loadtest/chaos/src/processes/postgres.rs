//! The suite's own PostgreSQL 15 under `.run/chaos/pg/`, following MACHINE.md: it refuses to run
//! as root, so as root every server tool runs as the `postgres` user. `pg_ctl` starts it and
//! stops it (`-m fast`); its PID comes from `postmaster.pid`.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use tokio::process::Command;

use super::{PidFiles, port_open, wait_until};

/// Where PostgreSQL's server tools are: `PG_BIN`, which `scripts/chaos.sh` exports from
/// `scripts/lib/pg.sh` (the one place the scripts look it up), else Debian's PostgreSQL 15.
pub fn pg_bin() -> String {
    std::env::var("PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".to_owned())
}

/// Superuser created by `initdb -U`, with trust authentication on loopback.
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
        let server = Self {
            port,
            dir: dir.to_owned(),
            pids: pids.clone(),
            running: false,
        };
        server.prepare_dirs().await?;
        if !server.data().join("PG_VERSION").exists() {
            let _ = std::fs::remove_dir_all(server.data());
            server.prepare_dirs().await?;
            let data = server.data();
            server
                .tool(
                    "initdb",
                    &[
                        "-D",
                        path_str(&data)?,
                        "-U",
                        SUPERUSER,
                        "--auth=trust",
                        "-E",
                        "UTF8",
                        "--locale=C.UTF-8",
                    ],
                )
                .await
                .context("initdb")?;
        }
        let mut server = server;
        server.start_server().await?;
        Ok(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    async fn prepare_dirs(&self) -> Result<()> {
        if let Some(parent) = self.dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let (data, sock) = (self.data(), self.dir.join("sock"));
        if is_root() {
            // The server runs as `postgres`: it owns its directories.
            for (dir, mode) in [(&self.dir, "0755"), (&data, "0700"), (&sock, "0700")] {
                run(Command::new("install")
                    .args(["-d", "-m", mode, "-o", "postgres", "-g", "postgres"])
                    .arg(dir))
                .await?;
            }
        } else {
            for dir in [&self.dir, &data, &sock] {
                std::fs::create_dir_all(dir)?;
            }
        }
        Ok(())
    }

    /// Runs a PostgreSQL server tool (as `postgres` when we are root).
    async fn tool(&self, name: &str, args: &[&str]) -> Result<String> {
        let bin = format!("{}/{name}", pg_bin());
        let mut command = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", &bin]);
            c
        } else {
            Command::new(&bin)
        };
        command.args(args).current_dir("/");
        run(&mut command).await
    }

    async fn start_server(&mut self) -> Result<()> {
        let (data, log, sock) = (self.data(), self.dir.join("pg.log"), self.dir.join("sock"));
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k '{}' -c max_connections=200 -c shared_buffers=128MB -c fsync=on \
             -c log_line_prefix='%m [%p] %e '",
            self.port,
            path_str(&sock)?
        );
        self.tool(
            "pg_ctl",
            &[
                "-D",
                path_str(&data)?,
                "-l",
                path_str(&log)?,
                "-w",
                "-t",
                "60",
                "-o",
                &options,
                "start",
            ],
        )
        .await
        .with_context(|| format!("pg_ctl start (see {})", log.display()))?;
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
        let data = self.data();
        self.tool(
            "pg_ctl",
            &[
                "-D",
                path_str(&data)?,
                "-m",
                "fast",
                "-w",
                "-t",
                "60",
                "stop",
            ],
        )
        .await
        .context("pg_ctl stop")?;
        self.running = false;
        self.pids.forget(PID_NAME);
        Ok(())
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
        let data = self.data();
        let pg_ctl = format!("{}/pg_ctl", pg_bin());
        let mut command = if is_root() {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--", &pg_ctl]);
            c
        } else {
            std::process::Command::new(&pg_ctl)
        };
        let _ = command
            .arg("-D")
            .arg(&data)
            .args(["-m", "fast", "-w", "-t", "30", "stop"])
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
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

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

fn path_str(path: &Path) -> Result<&str> {
    path.to_str().context("path is not UTF-8")
}

/// Runs a command to completion; its output is returned, or shown in the error if it failed.
async fn run(command: &mut Command) -> Result<String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("run {command:?}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        bail!("{command:?} failed ({}):\n{text}", output.status);
    }
    Ok(text)
}
