//! `lockctl` on one Redis (`--redis-url`, and `--url` on a server a test owns) and on Redlock
//! masters (`--url` and `LOCKKIT_URL`).

use std::process::{Command, Output};

use serde_json::Value;

use crate::{
    json_lines,
    servers::Masters,
    support::{lock_key, redis_url, unique},
};

fn lockctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockctl")).arg("--redis-url").arg(redis_url()).args(args).output().unwrap()
}

#[test]
fn acquire_prints_the_fence_and_the_release() {
    let name = unique("cli");

    let out = lockctl(&["acquire", &name, "--hold-ms", "50"]);

    assert!(out.status.success());
    let lines = json_lines(&out);
    assert_eq!(lines[0]["event"], "acquired");
    assert!(lines[0]["fence"].as_u64().unwrap() >= 1);
    assert_eq!(lines[1]["event"], "released");
    assert_eq!(lines[1]["held"], true);
}

/// A holder whose server goes away cannot renew: `lost` when the lease runs out, then `released`
/// with `held: false`.
#[tokio::test]
async fn a_holder_that_cannot_renew_prints_lost_then_released_not_held() {
    use std::io::{BufRead, BufReader};
    let mut server = crate::servers::RedisServer::start(&[]).await;
    let name = unique("cli-lost");
    let mut holder = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .args(["--url", &server.url(), "acquire", &name, "--ttl-ms", "300", "--hold-ms", "20000"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&first).unwrap()["event"], "acquired");

    server.kill();

    let rest: Vec<Value> = out.lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    assert!(holder.wait().unwrap().success());
    assert_eq!(rest[0]["event"], "lost", "{rest:?}");
    assert_eq!(rest[1]["event"], "released");
    assert_eq!(rest[1]["held"], false);
}

/// The control: the same holder with its server up keeps the lock through many leases.
#[tokio::test]
async fn a_holder_that_can_renew_keeps_the_lock_through_many_leases() {
    let server = crate::servers::RedisServer::start(&[]).await;
    let name = unique("cli-kept");
    let out = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .args(["--url", &server.url(), "acquire", &name, "--ttl-ms", "300", "--hold-ms", "1200"])
        .output()
        .unwrap();
    let lines = json_lines(&out);
    assert_eq!(lines.iter().map(|l| l["event"].as_str().unwrap()).collect::<Vec<_>>(), ["acquired", "released"]);
    assert_eq!(lines[1]["held"], true);
}

#[test]
fn a_held_lock_is_not_acquired_with_exit_code_3() {
    let name = unique("cli-held");
    let holder = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .args(["--redis-url", &redis_url(), "acquire", &name, "--hold-ms", "3000"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let inspect_held = || json_lines(&lockctl(&["inspect", &name])).first().is_some_and(|l| l["held"] == true);
    while !inspect_held() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    let out = lockctl(&["acquire", &name, "--wait-ms", "100"]);

    assert_eq!(out.status.code(), Some(3));
    assert_eq!(json_lines(&out)[0]["event"], "not_acquired");
    let holder = holder.wait_with_output().unwrap();
    assert!(holder.status.success());
}

#[test]
fn fence_reseeds_and_inspect_shows_it() {
    let name = unique("cli-fence");

    let out = lockctl(&["fence", &name, "--at-least", "41"]);
    let inspected = json_lines(&lockctl(&["inspect", &name]));

    assert_eq!(json_lines(&out)[0]["fence"], 41);
    assert_eq!(inspected[0]["fence"], 41);
    assert_eq!(inspected[0]["held"], false);
}

#[test]
fn bench_reports_pairs_per_second_and_percentiles() {
    let out = lockctl(&["bench", "--concurrency", "4", "--duration-ms", "200"]);

    let report = &json_lines(&out)[0];
    assert!(report["pairs"].as_u64().unwrap() > 0);
    for field in ["pairs_per_sec", "p50_us", "p99_us"] {
        assert!(report[field].is_number(), "{field}");
    }
}

#[tokio::test]
async fn the_url_picks_redlock_and_a_lost_quorum_exits_3_leaving_no_key() {
    let mut masters = Masters::start(5).await;
    let name = unique("cli-redlock");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lockctl")).env("LOCKKIT_URL", masters.url()).args(args).output().unwrap()
    };

    let out = run(&["acquire", &name, "--hold-ms", "10"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(json_lines(&out)[0]["event"], "acquired");

    for i in [0, 1, 2] {
        masters.nodes[i].kill();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .args(["--url", &masters.url(), "acquire", &name, "--wait-ms", "200"])
        .output()
        .unwrap();

    assert_eq!(out.status.code(), Some(3));
    let line = &json_lines(&out)[0];
    assert_eq!(line["event"], "not_acquired");
    assert_eq!(line["reason"], "no_quorum");
    for i in [3, 4] {
        let mut conn = masters.nodes[i].conn().await;
        let exists: bool = redis::cmd("EXISTS").arg(lock_key(&name)).query_async(&mut conn).await.unwrap();
        assert!(!exists, "node {i} keeps no key for the failed acquire");
    }
}

#[tokio::test]
async fn inspect_prints_a_semaphores_permits_with_their_expiries_and_the_old_fields() {
    let client = crate::support::client().await;
    let name = unique("cli-sem");
    let p1 = client.semaphore(&name, 3).lease(std::time::Duration::from_secs(20)).await.unwrap();
    let p2 = client.semaphore(&name, 3).lease(std::time::Duration::from_secs(20)).await.unwrap();

    let out = lockctl(&["inspect", &name]);

    assert!(out.status.success());
    let line = &json_lines(&out)[0];
    for field in ["name", "held", "ttl_ms", "fence"] {
        assert!(line.get(field).is_some(), "{field} is kept");
    }
    assert_eq!(line["name"], name.as_str());
    assert_eq!(line["held"], false);
    assert_eq!(line["fence"], p2.fence().get());
    assert_eq!(line["kind"], "semaphore");
    assert_eq!(line["permits"], 3);
    assert_eq!(line["permits_out"], 2);
    let holders = line["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2);
    for holder in holders {
        assert_eq!(holder["role"], "permit");
        assert_eq!(holder["id"].as_str().unwrap().len(), 8, "a short hash, not the token");
        let ttl_ms = holder["ttl_ms"].as_u64().unwrap();
        assert!(ttl_ms > 0 && ttl_ms <= 20_000);
    }
    assert_eq!(line["queue"], serde_json::json!([]));
    assert_eq!(line["delay_ms"], Value::Null);
    p1.release().await.unwrap();
    p2.release().await.unwrap();
}
