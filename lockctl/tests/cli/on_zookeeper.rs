//! `lockctl` on ZooKeeper (`ZOOKEEPER_URL`): the fence, and exit 3 while held.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

use crate::{support::unique, zookeeper_server::zookeeper_url};

/// Every test is bounded in time.
const TEST_BOUND: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_lockctl_prints_the_fence_and_exits_3_while_held() {
    tokio::time::timeout(TEST_BOUND, async {
        let url = zookeeper_url();
        let name = unique("zk-cli");
        let lockctl = move || {
            let mut command = Command::new(env!("CARGO_BIN_EXE_lockctl"));
            command.args(["--url", &url]).stdout(Stdio::piped());
            command
        };
        let mut holder = lockctl.clone()().args(["acquire", &name, "--hold-ms", "3000"]).spawn().unwrap();
        let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
        let (acquired, mut lines) = tokio::task::spawn_blocking(move || (lines.next(), lines)).await.unwrap();
        let acquired: serde_json::Value = serde_json::from_str(&acquired.unwrap().unwrap()).unwrap();

        let blocked =
            tokio::task::spawn_blocking(move || lockctl().args(["acquire", &name, "--wait-ms", "200"]).output())
                .await
                .unwrap()
                .unwrap();

        assert_eq!(acquired["event"], "acquired");
        assert!(acquired["fence"].as_u64().unwrap() > 0);
        assert_eq!(blocked.status.code(), Some(3));
        let line: serde_json::Value = serde_json::from_slice(&blocked.stdout).unwrap();
        assert_eq!(line["event"], "not_acquired");
        let released: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(released["event"], "released");
        assert_eq!(released["held"], true);
        assert!(holder.wait().unwrap().success());
    })
    .await
    .expect("bounded");
}
