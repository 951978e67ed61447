//! A server that one test owns, started by the project's one supervisor (the `launch` crate,
//! which calls `scripts/server.sh KIND run`; the server's command line is in
//! `scripts/lib/KIND.sh`): in a temporary directory removed with the process on drop, on a port
//! picked here.

use std::{net::TcpListener, path::PathBuf};

pub(crate) use launch::Launched;
use launch::Server;

/// A fresh temporary directory for one test's server of `kind` on `port`.
pub(crate) fn temp_dir(kind: &str, port: u16) -> PathBuf {
    std::env::temp_dir().join(format!("lockkit-it-{kind}-{port}-{:08x}", rand::random::<u32>()))
}

/// Starts `scripts/server.sh KIND run DIR PORT ARG...` in a temporary directory. It returns at
/// once: readiness is the caller's to judge (each kind answers its own probe).
pub(crate) fn spawn(kind: &str, port: u16, args: &[&str]) -> Launched {
    Server::new(kind, &temp_dir(kind, port))
        .arg(port.to_string())
        .args(args)
        .remove_dir_on_drop()
        .run()
        .unwrap_or_else(|e| panic!("start {kind} through scripts/server.sh: {e}"))
}

/// Panics with its log if the server has exited (it failed to start).
pub(crate) fn assert_running(server: &mut Launched) {
    if let Some(status) = server.try_wait().unwrap() {
        panic!("the server exited during start-up ({status}):\n{}", server.log());
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
