//! `lockctl elect` as processes on one Redis and on etcd: one JSON line per change (leader,
//! follower with the leader's value and term, resigned, lost), a clean resignation on SIGTERM and
//! on Ctrl-C (SIGINT) that hands over to the waiting candidate, and a watcher without a value.

use std::{
    io::{BufRead, BufReader, Lines},
    process::{Child, ChildStdout, Command, Stdio},
};

use serde_json::Value;

use crate::{etcd_server::etcd_url, support::redis_url, support::unique};

/// One `lockctl elect` process and its JSON lines.
struct Elect {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Elect {
    fn start(url: &str, args: &[&str]) -> Self {
        Self::with_lease(url, "3000", args)
    }

    fn with_lease(url: &str, ttl_ms: &str, args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lockctl"))
            .args(["--url", url, "elect", "--ttl-ms", ttl_ms])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, lines }
    }

    /// The next JSON line.
    fn next(&mut self) -> Value {
        serde_json::from_str(&self.lines.next().expect("a line").unwrap()).unwrap()
    }

    /// The next line whose event is `event`, skipping others.
    fn next_event(&mut self, event: &str) -> Value {
        loop {
            let line = self.next();
            if line["event"] == event {
                return line;
            }
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args([signal, &pid]).status().unwrap().success());
    }

    /// Exit code after the rest of the output.
    fn exit(mut self) -> Option<i32> {
        self.lines.by_ref().for_each(drop);
        self.child.wait().unwrap().code()
    }
}

/// A failed test leaves no candidate behind (it would lead, or wait, until its lease ends).
impl Drop for Elect {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `a` leads, `b` follows (seeing `a`'s value and term) and a watcher sees `a`; `a` resigns on
/// SIGTERM and `b` leads under a larger term; `b` resigns on Ctrl-C and the watcher sees nobody.
fn resign_hands_over(url: &str) {
    let name = unique("cli-elect");
    let mut a = Elect::start(url, &[&name, "candidate-a"]);
    let leader_a = a.next();
    let mut b = Elect::start(url, &[&name, "candidate-b"]);
    let follower_b = b.next();
    let mut watcher = Elect::start(url, &[&name]);
    let watched = watcher.next();

    a.signal("-TERM");
    let resigned_a = a.next();
    let exit_a = a.exit();
    let leader_b = b.next_event("leader");
    b.signal("-INT");
    let resigned_b = b.next();
    let exit_b = b.exit();
    let mut nobody = watcher.next();
    while !nobody["leader"].is_null() {
        nobody = watcher.next();
    }
    watcher.signal("-TERM");
    let exit_watcher = watcher.exit();

    assert_eq!(leader_a["event"], "leader", "{leader_a}");
    assert_eq!(leader_a["value"], "candidate-a");
    let term_a = leader_a["term"].as_u64().unwrap();
    assert_eq!(follower_b["event"], "follower", "{follower_b}");
    assert_eq!(follower_b["leader"]["value"], "candidate-a", "the follower shows the leader's value");
    assert_eq!(follower_b["leader"]["term"], term_a);
    assert_eq!(watched["leader"]["value"], "candidate-a", "{watched}");
    assert_eq!(resigned_a["event"], "resigned", "{resigned_a}");
    assert_eq!(resigned_a["held"], true, "a led until it resigned");
    assert_eq!(exit_a, Some(0));
    assert_eq!(leader_b["value"], "candidate-b");
    assert!(leader_b["term"].as_u64().unwrap() > term_a, "{leader_b} after {leader_a}");
    assert_eq!(resigned_b["event"], "resigned", "{resigned_b}");
    assert_eq!(exit_b, Some(0));
    assert_eq!(nobody["event"], "follower");
    assert_eq!(exit_watcher, Some(0));
}

/// A leader whose server goes away cannot renew: `lost` once the lease runs out, exit 4.
#[tokio::test]
async fn elect_on_redis_prints_lost_when_the_lease_cannot_be_renewed() {
    let mut server = crate::servers::RedisServer::start(&[]).await;
    let name = unique("cli-elect-lost");
    let mut leader = Elect::with_lease(&server.url(), "300", &[&name, "candidate"]);
    let first = leader.next();

    server.kill();
    let lost = leader.next();

    assert_eq!(first["event"], "leader", "{first}");
    assert_eq!(lost["event"], "lost", "{lost}");
    assert_eq!(leader.exit(), Some(4));
}

#[test]
fn elect_on_redis_prints_each_change_and_resigns_on_a_signal() {
    resign_hands_over(&redis_url());
}

#[test]
fn elect_on_etcd_prints_each_change_and_resigns_on_a_signal() {
    resign_hands_over(&etcd_url());
}
