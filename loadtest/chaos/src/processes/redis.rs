//! The suite's own Redis: a foreground `redis-server` child (so its PID is ours), without
//! persistence, that scenarios can `kill -9` and restart empty. Its command line is the project's
//! one (`scripts/server.sh redis run`, through the `launch` crate).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use launch::{Launched, Server};

use super::{PidFiles, port_open, terminate, wait_until};

/// Name of the pid file of the suite's Redis.
const PID_NAME: &str = "redis";

/// A `redis-server` the suite started on 127.0.0.1.
#[derive(Debug)]
pub struct RedisServer {
    /// Its pid file's name.
    name: String,
    port: u16,
    dir: PathBuf,
    pids: PidFiles,
    process: Option<Launched>,
}

impl RedisServer {
    /// Starts Redis on `port` with its files under `dir` (`scripts/lib/redis.sh`: no RDB, no AOF,
    /// `DEBUG` from loopback).
    pub async fn start(port: u16, dir: &Path, pids: &PidFiles) -> Result<Self> {
        Self::start_named(PID_NAME, port, dir, pids).await
    }

    /// [`start`](Self::start), with its pid file named `name` (for several servers at once).
    pub async fn start_named(name: &str, port: u16, dir: &Path, pids: &PidFiles) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        if port_open(port).await {
            bail!("port {port} is already in use; stop what listens there or set --redis-port");
        }
        let mut server = Self {
            name: name.to_owned(),
            port,
            dir: dir.to_owned(),
            pids: pids.clone(),
            process: None,
        };
        server.spawn().await?;
        Ok(server)
    }

    async fn spawn(&mut self) -> Result<()> {
        let process = Server::new("redis", &self.dir)
            .arg(self.port.to_string())
            .run()
            .context("start redis-server (is it installed? scripts/chaos.sh installs it)")?;
        let pid = process.pid().context("redis-server exited at once")?;
        self.pids.record(&self.name, pid, "redis-server");
        self.process = Some(process);
        let url = self.url();
        wait_until(Duration::from_secs(20), "redis answers PING", || ping(&url)).await
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The PID of the running server, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(Launched::pid)
    }

    /// Whether the suite currently runs it.
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// `kill -9`: every key, lock and fence counter is gone. Returns once the port is closed.
    pub async fn kill9(&mut self) -> Result<()> {
        let Some(mut process) = self.process.take() else {
            bail!("redis is not running")
        };
        process.kill();
        self.pids.forget(&self.name);
        let port = self.port;
        wait_until(
            Duration::from_secs(10),
            "redis port closed",
            || async move { !port_open(port).await },
        )
        .await
    }

    /// Starts it again, empty, on the same port.
    pub async fn restart(&mut self) -> Result<()> {
        if self.process.is_some() {
            bail!("redis is already running");
        }
        self.spawn().await
    }

    /// Stops it for good (SIGTERM, then SIGKILL after 5 s).
    pub async fn stop(&mut self) -> Result<()> {
        let Some(mut process) = self.process.take() else {
            return Ok(());
        };
        terminate(&mut process, Duration::from_secs(5)).await?;
        self.pids.forget(&self.name);
        Ok(())
    }
}

/// Whether the Redis at `url` answers `PING`.
pub async fn ping(url: &str) -> bool {
    let attempt = async {
        let mut conn = redis::Client::open(url)
            .ok()?
            .get_multiplexed_async_connection()
            .await
            .ok()?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), attempt).await,
        Ok(Some(_))
    )
}
