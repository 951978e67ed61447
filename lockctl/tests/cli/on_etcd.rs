//! `lockctl` on etcd (`ETCD_URL`): the fence, exit 3 while held, and exclusion with `etcdctl lock`.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::{
    etcd_server::{etcd_url, etcdctl, etcdctl_holding, wait_exit},
    json_lines,
    support::unique,
};

fn lockctl(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    command.arg("--url").arg(url).args(args);
    command
}

#[test]
fn acquire_prints_the_fence_and_exits_3_when_held() {
    let url = etcd_url();
    let name = unique("etcd-lockctl");
    let out = lockctl(&url, &["acquire", &name, "--hold-ms", "50"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out);
    assert_eq!(lines[0]["event"], "acquired");
    assert!(lines[0]["fence"].as_u64().unwrap() >= 1);
    assert_eq!(lines[1]["event"], "released");
    assert_eq!(lines[1]["held"], true);

    let holder = etcdctl_holding(&url, &name, 2);
    let refused = lockctl(&url, &["acquire", &name, "--wait-ms", "200", "--ttl-ms", "1000"]).output().unwrap();

    assert_eq!(refused.status.code(), Some(3));
    assert_eq!(json_lines(&refused)[0]["event"], "not_acquired");
    let holder = holder.wait_with_output().unwrap();
    assert!(holder.status.success());
}

#[test]
fn lockctl_and_etcdctl_exclude_each_other() {
    let url = etcd_url();
    let name = unique("etcd-lockctl-interop");
    let mut holder = lockctl(&url, &["acquire", &name, "--hold-ms", "2000"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("\"acquired\""), "{line}");

    let mut waiter = etcdctl(&url).args(["lock", &name, "true"]).spawn().unwrap();
    let blocked = wait_exit_or_keep(&mut waiter, Duration::from_millis(1000)).is_none();
    let waited = wait_exit(&mut waiter, Duration::from_secs(6));

    assert!(blocked, "etcdctl waits while lockctl holds");
    assert!(waited.is_some_and(|s| s.success()), "etcdctl gets the lock when lockctl releases");
    assert!(holder.wait().unwrap().success());
}

/// The exit status of `child` if it exits within `within`; left running otherwise.
fn wait_exit_or_keep(child: &mut std::process::Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}
