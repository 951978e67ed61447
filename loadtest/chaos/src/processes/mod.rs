//! The processes the suite owns, one file each: [`redis`], [`postgres`], [`seckill`], each started
//! by the project's one supervisor, the `launch` crate (`scripts/server.sh`, whose libraries hold
//! every server's command line). Everything here acts on processes by the PID the suite itself
//! started, never by name.
//!
//! Each started process is also written to a pid file under `.run/chaos/pids/` (`PID COMM`), so
//! that `scripts/chaos.sh` can end exactly those if the runner itself dies.

pub mod postgres;
pub mod redis;
pub mod seckill;

use std::{
    future::Future,
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use launch::Launched;
pub use nix::sys::signal::Signal;
use nix::{sys::signal::kill, unistd::Pid};
use tokio::time::Instant;

/// Sends `signal` to the process `pid` (one the suite started).
pub fn signal(pid: u32, signal: Signal) -> Result<()> {
    let raw = i32::try_from(pid).context("pid out of range")?;
    kill(Pid::from_raw(raw), signal).with_context(|| format!("kill -{signal} {pid}"))
}

/// Whether `pid` names a live, not yet reaped, non-zombie process.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// A free TCP port on 127.0.0.1 (the OS picks it; it is free for a moment, which is enough on a
/// machine where nothing else races for ephemeral ports).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("bind 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
pub async fn port_open(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    matches!(
        tokio::time::timeout(
            Duration::from_millis(500),
            tokio::net::TcpStream::connect(addr)
        )
        .await,
        Ok(Ok(_))
    )
}

/// Polls `check` every 50 ms until it returns true, for at most `within`.
pub async fn wait_until<F, Fut>(within: Duration, what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{what}: not within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops `process` gracefully: SIGTERM, then SIGKILL if it has not exited within `grace`. Waits
/// without blocking the runtime (the load may still be running).
pub async fn terminate(process: &mut Launched, grace: Duration) -> Result<()> {
    let Some(pid) = process.pid() else {
        return Ok(());
    };
    signal(pid, Signal::SIGTERM)?;
    let deadline = Instant::now() + grace;
    while process.try_wait()?.is_none() {
        if Instant::now() >= deadline {
            process.kill();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The pid files of the processes the suite started (`.run/chaos/pids/NAME.pid`, `PID COMM`).
#[derive(Debug, Clone)]
pub struct PidFiles {
    dir: PathBuf,
}

impl PidFiles {
    /// Pid files under `dir` (created if missing).
    pub fn new(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// Records that the suite started `pid`, whose command name is `comm`.
    pub fn record(&self, name: &str, pid: u32, comm: &str) {
        let _ = std::fs::write(
            self.dir.join(format!("{name}.pid")),
            format!("{pid} {comm}\n"),
        );
    }

    /// Forgets `name` after the suite stopped it.
    pub fn forget(&self, name: &str) {
        let _ = std::fs::remove_file(self.dir.join(format!("{name}.pid")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_free_port_is_free() {
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX));
        let port = free_port().unwrap();
        assert!(TcpListener::bind(("127.0.0.1", port)).is_ok());
    }
}
