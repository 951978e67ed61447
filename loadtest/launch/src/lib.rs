//! The project's one Rust supervisor of server processes, for lockkit's tests and the chaos
//! suite. It writes no command line of its own: every server is started by
//! `scripts/server.sh KIND ACTION DIR ARG...`, whose `scripts/lib/KIND.sh` holds that server's
//! command line (the bench and the demo call the same script from Python, the other scripts
//! source the same libraries).
//!
//! A [`Server`] says what to start (kind, directory, arguments, environment, where the script's
//! own output goes); [`Server::run`] starts it with `run`, which `exec`s the server, so the
//! [`Launched`] child *is* the server: it is frozen, thawed, killed and reaped by its own PID,
//! never by name, and killed on drop. [`Server::command`] gives the other actions (`start` and
//! `stop` for PostgreSQL, which `pg_ctl` daemonises).
//!
//! Standard library only: signals go through `kill(1)`, so that a test crate needs no extra
//! dependency for them.

use std::{
    ffi::{OsStr, OsString},
    fs::OpenOptions,
    io,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
};

/// `scripts/server.sh` of the repository this crate is built from.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/server.sh")
}

/// What to start: `scripts/server.sh KIND ACTION DIR ARG...` with an environment.
#[derive(Debug, Clone)]
pub struct Server {
    kind: String,
    dir: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    output: Option<PathBuf>,
    remove_dir: bool,
}

impl Server {
    /// A server of `kind` (`redis`, `postgres`, `zookeeper`, `etcd`, `pgbouncer`, `faultproxy`,
    /// `seckill`) whose files live in `dir`.
    pub fn new(kind: &str, dir: &Path) -> Self {
        Self { kind: kind.to_owned(), dir: dir.to_owned(), args: Vec::new(), env: Vec::new(), output: None, remove_dir: false }
    }

    /// Appends an argument after DIR (the port first, for most kinds).
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Appends arguments after DIR.
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable of the script (and so of the server).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Removes an environment variable the caller has.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Appends the script's standard output and error to `file` (by default they are discarded;
    /// the server itself logs to DIR either way).
    pub fn output_to(mut self, file: &Path) -> Self {
        self.output = Some(file.to_owned());
        self
    }

    /// Removes DIR when the [`Launched`] server is dropped (a test's temporary server).
    pub fn remove_dir_on_drop(mut self) -> Self {
        self.remove_dir = true;
        self
    }

    /// `bash scripts/server.sh KIND ACTION DIR ARG...` with the environment, stdin closed and
    /// the output where [`output_to`](Self::output_to) said, not yet spawned.
    pub fn command(&self, action: &str) -> io::Result<Command> {
        let mut command = Command::new("bash");
        command.arg(script()).args([&self.kind, action]).arg(&self.dir).args(&self.args).stdin(Stdio::null());
        for (key, value) in &self.env {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        match &self.output {
            Some(file) => {
                let out = OpenOptions::new().create(true).append(true).open(file)?;
                command.stdout(out.try_clone()?).stderr(out);
            }
            None => {
                command.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        Ok(command)
    }

    /// Starts it with `run` (the script execs the server, so the child is the server).
    pub fn run(self) -> io::Result<Launched> {
        let mut launched = Launched { server: self, child: None };
        launched.respawn()?;
        Ok(launched)
    }
}

/// A server this process started with `run`, killed (SIGKILL) on drop.
#[derive(Debug)]
pub struct Launched {
    server: Server,
    child: Option<Child>,
}

impl Launched {
    /// Starts it again with the same arguments, environment and directory, after it was killed
    /// or exited (what a kind keeps in DIR survives, as after a crash).
    pub fn respawn(&mut self) -> io::Result<()> {
        if self.child.is_some() {
            return Err(io::Error::other(format!("{} is still running", self.server.kind)));
        }
        std::fs::create_dir_all(&self.server.dir)?;
        self.child = Some(self.server.command("run")?.spawn()?);
        Ok(())
    }

    /// Its PID while this process has not reaped it.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its log so far (`DIR/KIND.log`; a seckill instance logs to `DIR/NAME.log`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.server.dir.join(format!("{}.log", self.server.kind))).unwrap_or_default()
    }

    /// Sends `signal` (`STOP`, `CONT`, `TERM`, `KILL`...) to it.
    pub fn signal(&self, signal: &str) -> io::Result<()> {
        let pid = self.pid().ok_or_else(|| io::Error::other(format!("{} is not running", self.server.kind)))?;
        let status = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status()?;
        if status.success() { Ok(()) } else { Err(io::Error::other(format!("kill -{signal} {pid}: {status}"))) }
    }

    /// Freezes it (SIGSTOP): it keeps its sockets and answers nothing.
    pub fn freeze(&self) -> io::Result<()> {
        self.signal("STOP")
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn thaw(&self) -> io::Result<()> {
        self.signal("CONT")
    }

    /// Its exit status once it has exited (then reaped and forgotten), `None` while it runs.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        let Some(child) = self.child.as_mut() else { return Ok(None) };
        let status = child.try_wait()?;
        if status.is_some() {
            self.child = None;
        }
        Ok(status)
    }

    /// Kills it (SIGKILL, which ends a frozen one too) and reaps it; its directory stays.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        self.kill();
        if self.server.remove_dir {
            let _ = std::fs::remove_dir_all(&self.server.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_script_is_where_the_crate_says() {
        assert!(super::script().is_file(), "{}", super::script().display());
    }
}
