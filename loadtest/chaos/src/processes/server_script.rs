//! `scripts/server.sh`, the project's one way to start Redis, PostgreSQL and seckill. The suite
//! does not write a command line of its own for any of them: it asks the script, which the
//! project's other scripts, the demo and the bench use too.
//!
//! A supervised server (Redis, seckill) is started with `run`, which `exec`s it: the child the
//! suite spawned *is* the server, so its PID can be paused, killed and reaped. PostgreSQL is
//! started and stopped with `start`/`stop` (`pg_ctl` daemonises it anyway).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
};

use anyhow::{Context, Result, bail};
use tokio::process::Command;

/// The script: `scripts/server.sh` of the repository this crate is built from.
pub fn path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/server.sh")
}

/// `bash scripts/server.sh KIND ACTION DIR ARG`, not yet spawned.
pub fn command(kind: &str, action: &str, dir: &Path, arg: &str) -> Command {
    Command::from(blocking_command(kind, action, dir, arg))
}

/// The blocking form of [`command`], for `Drop`.
pub fn blocking_command(kind: &str, action: &str, dir: &Path, arg: &str) -> std::process::Command {
    let mut command = std::process::Command::new("bash");
    command
        .arg(path())
        .args([kind, action])
        .arg(dir)
        .arg(arg)
        .stdin(Stdio::null());
    command
}

/// Runs `command` to completion: its standard output, or an error quoting both streams.
pub async fn output(mut command: Command) -> Result<String> {
    let output = command
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
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_script_is_where_the_crate_says() {
        assert!(super::path().is_file(), "{}", super::path().display());
    }
}
