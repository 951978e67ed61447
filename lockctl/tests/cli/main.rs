//! `lockctl` run as a process on every backend's URL: JSON lines out, exit code 3 when not
//! acquired. The servers and helpers are lockkit's own test support (`lockkit/tests/it/`),
//! included by path, so that each server kind keeps one launcher.

use std::process::Output;

use serde_json::Value;

// Shared with lockkit's tests, which use all of it; these tests use a part.
#[allow(dead_code)]
#[path = "../../../lockkit/tests/it/etcd_server.rs"]
mod etcd_server;
#[allow(dead_code)]
#[path = "../../../lockkit/tests/it/launched.rs"]
mod launched;
#[allow(dead_code)]
#[path = "../../../lockkit/tests/it/postgres_server.rs"]
mod postgres_server;
#[allow(dead_code)]
#[path = "../../../lockkit/tests/it/servers.rs"]
mod servers;
#[allow(dead_code)]
#[path = "../../../lockkit/tests/it/support.rs"]
mod support;
#[allow(dead_code)]
#[path = "../../../lockkit/tests/it/zookeeper_server.rs"]
mod zookeeper_server;

mod elect;
mod on_etcd;
mod on_postgres;
mod on_redis;
mod on_zookeeper;

/// The JSON lines `lockctl` printed on stdout.
fn json_lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect()
}
