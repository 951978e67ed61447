//! `lock-tokens`: at the lockkit level, a forged or stale owner token can neither release nor
//! extend a lock. Uses lockkit's API plus raw Redis commands from "another client":
//!
//! 1. a raw `EVAL` of the usual compare-and-delete (and of an owner-checked `PEXPIRE`) with a
//!    wrong token leaves the holder's key and lease untouched;
//! 2. another lockkit client cannot take a held lock;
//! 3. a guard whose fixed lease ran out, after someone else took the lock: `extend()` fails as
//!    lost, `release()` returns `false`, and the new holder's key survives;
//! 4. a watched guard whose key was expired from outside (it does not know yet) and taken over:
//!    the same, with a larger fence for the new holder, and the old guard reports the loss.

use std::time::Duration;

use anyhow::{Context, Result};
use lockkit::LockClient;
use redis::aio::MultiplexedConnection;

use crate::{
    environment::Environment,
    progress,
    report::{Check, ScenarioReport},
};

const DESCRIPTION: &str = "lockkit: a forged or stale owner token cannot release or extend a lock (raw EVAL with a wrong token; a stale guard's release() returns false and extend() fails; the new holder keeps the lock).";

/// The usual compare-and-delete a client would send to release.
const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// An owner-checked `PEXPIRE`, as an extension would send it.
const COMPARE_AND_EXPIRE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";

/// Runs the scenario.
pub(crate) async fn run(env: &mut Environment) -> ScenarioReport {
    let mut report = ScenarioReport::new("lock-tokens", None, DESCRIPTION);
    progress!("scenario lock-tokens (lockkit)");
    match checks(&env.redis.url()).await {
        Ok((checks, operations)) => {
            report.requests = operations;
            report.checks = checks;
        }
        Err(e) => report.error = Some(format!("{e:#}")),
    }
    report
}

/// Counts Redis round trips made by the checks.
struct Ops(u64);

impl Ops {
    fn add(&mut self, n: u64) {
        self.0 += n;
    }
}

async fn checks(url: &str) -> Result<(Vec<Check>, u64)> {
    let holder = LockClient::builder(url)
        .default_lease(Duration::from_secs(1))
        .connect()
        .await?;
    let other = LockClient::connect(url).await?;
    let patient =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(5)));
    let mut raw = redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&patient)
        .await?;
    let mut ops = Ops(0);
    let mut checks = Vec::new();
    let unique = |what: &str| format!("chaos:tokens:{what}:{:08x}", rand::random::<u32>());

    // 1. Forged tokens from a raw client.
    let name = unique("forged");
    let key = lock_key(&name);
    let guard = holder.lock(&name, Duration::from_secs(2)).await?;
    let token: String = get(&mut raw, &key)
        .await?
        .context("the lock key holds the owner token")?;
    let mut refused = true;
    for forged in [
        "forged-token",
        "",
        &token[..token.len() - 1],
        &format!("{token}0"),
    ] {
        let deleted: i64 = eval(&mut raw, COMPARE_AND_DELETE, &key, &[forged]).await?;
        let expired: i64 = eval(&mut raw, COMPARE_AND_EXPIRE, &key, &[forged, "1"]).await?;
        refused &= deleted == 0 && expired == 0;
    }
    ops.add(9);
    let still: Option<String> = get(&mut raw, &key).await?;
    let pttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut raw).await?;
    ops.add(2);
    checks.push(Check::new(
        "forged_token_cannot_release_or_extend",
        refused && still.as_deref() == Some(token.as_str()) && pttl > 100,
        format!("4 forged tokens: compare-and-delete and compare-and-expire all refused: {refused}; key still the holder's: {}; pttl {pttl} ms", still.as_deref() == Some(token.as_str())),
    ));

    // 2. Another lockkit client cannot take it.
    let taken = other.try_lock(&name).await?;
    ops.add(1);
    checks.push(Check::new(
        "held_lock_cannot_be_taken",
        taken.is_none(),
        format!(
            "another client's try_lock: {}",
            if taken.is_none() {
                "refused"
            } else {
                "GRANTED"
            }
        ),
    ));
    drop(taken);
    let released = guard.release().await?;
    ops.add(1);
    checks.push(Check::new(
        "owner_releases",
        released,
        format!("the holder's own release returned {released}"),
    ));

    // 3. A fixed lease that ran out; someone else took the lock.
    let name = unique("stale");
    let key = lock_key(&name);
    let mut stale = holder
        .acquire(&name)
        .lease(Duration::from_millis(200))
        .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let successor = other
        .try_lock(&name)
        .await?
        .context("the expired lock is free for another client")?;
    let successor_token: Option<String> = get(&mut raw, &key).await?;
    let extend = stale.extend(Duration::from_secs(5)).await;
    let released = stale.release().await?;
    let after: Option<String> = get(&mut raw, &key).await?;
    ops.add(5);
    checks.push(Check::new(
        "stale_guard_cannot_release_or_extend",
        extend.as_ref().is_err_and(lockkit::Error::is_lost)
            && !released
            && after == successor_token
            && after.is_some(),
        format!(
            "extend: {}; release returned {released}; successor's key intact: {}",
            match &extend {
                Ok(()) => "EXTENDED".to_owned(),
                Err(e) => format!("refused ({e})"),
            },
            after == successor_token && after.is_some()
        ),
    ));
    successor.release().await?;

    // 4. A watched guard whose key was expired from outside and taken over, before it noticed.
    let name = unique("expired");
    let key = lock_key(&name);
    let mut watched = holder.lock(&name, Duration::from_secs(2)).await?;
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(1)
        .query_async(&mut raw)
        .await?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let successor = other
        .try_lock(&name)
        .await?
        .context("the expired lock is free for another client")?;
    let extend = watched.extend(Duration::from_secs(5)).await;
    let lost_reported = tokio::time::timeout(Duration::from_secs(2), watched.lost())
        .await
        .is_ok();
    let (old_fence, new_fence) = (watched.fence(), successor.fence());
    let released = watched.release().await?;
    let after: Option<String> = get(&mut raw, &key).await?;
    ops.add(6);
    checks.push(Check::new(
        "expired_guard_cannot_release_or_extend",
        extend.is_err() && !released && after.is_some() && new_fence > old_fence && lost_reported,
        format!(
            "extend refused: {}; release returned {released}; successor holds the key: {}; fences {old_fence} -> {new_fence}; loss reported: {lost_reported}",
            extend.is_err(),
            after.is_some()
        ),
    ));
    successor.release().await?;
    Ok((checks, ops.0))
}

fn lock_key(name: &str) -> String {
    format!("{{lockkit:{name}}}")
}

async fn get(raw: &mut MultiplexedConnection, key: &str) -> Result<Option<String>> {
    Ok(redis::cmd("GET").arg(key).query_async(raw).await?)
}

async fn eval(
    raw: &mut MultiplexedConnection,
    script: &str,
    key: &str,
    args: &[&str],
) -> Result<i64> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(1).arg(key);
    for a in args {
        cmd.arg(*a);
    }
    Ok(cmd.query_async(raw).await?)
}
