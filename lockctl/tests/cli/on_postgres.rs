//! `lockctl` on PostgreSQL (`DATABASE_URL`), as a lease table and as advisory locks.

use std::{
    process::{Command, Output},
    time::{Duration, Instant},
};

use crate::{json_lines, postgres_server::database_url, support::unique};

fn lockctl(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockctl")).args(["--url", url]).args(args).output().unwrap()
}

#[test]
fn postgres_lockctl_prints_the_fence_and_exits_3_when_held() {
    let base = database_url();
    // The lease table, then advisory locks, on the same server.
    for url in [base.clone(), base.replacen("postgres://", "postgres+advisory://", 1)] {
        let name = unique("pg-cli");

        let out = lockctl(&url, &["acquire", &name, "--hold-ms", "50"]);
        assert!(out.status.success(), "{url}: {}", String::from_utf8_lossy(&out.stderr));
        let lines = json_lines(&out);
        assert_eq!(lines[0]["event"], "acquired");
        assert!(lines[0]["fence"].as_u64().unwrap() >= 1);
        assert_eq!(lines[1]["event"], "released");
        assert_eq!(lines[1]["held"], true);

        let holder = Command::new(env!("CARGO_BIN_EXE_lockctl"))
            .args(["--url", &url, "acquire", &name, "--hold-ms", "3000"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let held = || json_lines(&lockctl(&url, &["inspect", &name])).first().is_some_and(|l| l["held"] == true);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !held() {
            assert!(Instant::now() < deadline, "{url}: the holder never showed up");
            std::thread::sleep(Duration::from_millis(20));
        }

        let out = lockctl(&url, &["acquire", &name, "--wait-ms", "100"]);

        assert_eq!(out.status.code(), Some(3), "{url}");
        assert_eq!(json_lines(&out)[0]["event"], "not_acquired");
        assert!(holder.wait_with_output().unwrap().status.success());
    }
}
