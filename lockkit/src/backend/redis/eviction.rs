//! Why lockkit refuses a Redis that may evict its keys, and the check each Redis backend runs at
//! connect.
//!
//! Under memory pressure Redis evicts keys by its `maxmemory-policy`:
//! - `allkeys-*` may evict any key, among them a lock's fence counter `{prefix:NAME}:fence`, which
//!   never expires. The next grant then starts the counter again from 1: fences go backwards, a
//!   new holder's fence is below those the store already accepted, and its writes are refused
//!   until someone re-seeds the counter (`ensure_fence_at_least`);
//! - `volatile-*` evicts keys that expire, which is every held lock `{prefix:NAME}`: the lock is
//!   free while its holder still believes it holds it.
//!
//! Only `noeviction` (Redis' default) keeps both: a write that needs memory fails instead. So
//! [`check`] refuses any other policy with a [`Config`](crate::ErrorKind::Config) error that says
//! why, unless the user opted out (`LockClientBuilder::allow_eviction`, or `allow_eviction=true`
//! in the URL). A server that will not say (`CONFIG` refused by an ACL, or renamed away, as
//! managed services do) is let through with a warning: lockkit cannot tell, the operator can.
//!
//! Not covered: a policy changed at runtime (`CONFIG SET`) after the client connected, and a
//! Redlock node that was down at connect (it is not read when it comes back).

use redis::Value;

use crate::model::error::{Error, ErrorKind, Result};

/// The command that reads the policy.
pub(crate) fn command() -> redis::Cmd {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    cmd
}

/// Judges one server's answer to [`command`]: `Ok` when it is `noeviction`, or when the server
/// would not say (then with a warning). `server` names it in the messages (never credentials).
pub(crate) fn check(server: &str, answer: redis::RedisResult<Value>) -> Result<()> {
    let answer = match answer {
        Ok(answer) => answer,
        // No connection, or too slow: the ping fails the same way, with its own error.
        Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() => {
            return Err(e.into());
        }
        // NOPERM (ACL), or an unknown command (renamed away): the server will not tell.
        Err(e) => {
            tracing::warn!(
                server,
                error = %e,
                "cannot read maxmemory-policy (CONFIG GET refused); lockkit is safe only under noeviction: \
                 make sure this server does not evict keys"
            );
            return Ok(());
        }
    };
    let policy = match policy_of(answer) {
        Some(policy) => policy,
        None => {
            tracing::warn!(
                server,
                "maxmemory-policy not in the answer to CONFIG GET; lockkit is safe only under noeviction"
            );
            return Ok(());
        }
    };
    if policy.eq_ignore_ascii_case("noeviction") {
        return Ok(());
    }
    let what = if policy.starts_with("allkeys") {
        "it may evict a lock's fence counter, which never expires, and fences would start again from 1"
    } else {
        "it may evict held locks, which expire, and a lock would be free while its holder still holds it"
    };
    Err(Error::new(
        ErrorKind::Config,
        format!(
            "redis at {server} has maxmemory-policy {policy}: {what}. Set maxmemory-policy noeviction there, \
             or opt out with allow_eviction (builder or URL parameter) if you accept that"
        ),
    ))
}

/// The policy in a `CONFIG GET maxmemory-policy` answer: a flat `[name, value]` array (RESP2) or
/// a map (RESP3).
fn policy_of(answer: Value) -> Option<String> {
    let pairs: Vec<(String, String)> = match answer {
        Value::Map(entries) => entries
            .into_iter()
            .filter_map(|(k, v)| Some((redis::from_redis_value(k).ok()?, redis::from_redis_value(v).ok()?)))
            .collect(),
        other => {
            let flat: Vec<String> = redis::from_redis_value(other).ok()?;
            flat.chunks_exact(2).map(|pair| (pair[0].clone(), pair[1].clone())).collect()
        }
    };
    pairs.into_iter().find(|(name, _)| name.eq_ignore_ascii_case("maxmemory-policy")).map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn only_noeviction_passes() {
        let answer = |policy: &str| Ok(Value::Array(vec![bulk("maxmemory-policy"), bulk(policy)]));
        assert!(check("h:1", answer("noeviction")).is_ok());
        for policy in ["allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-ttl"] {
            let err = check("h:1", answer(policy)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{policy}");
            assert!(err.to_string().contains(policy) && err.to_string().contains("noeviction"), "{err}");
        }
        let map = Value::Map(vec![(bulk("maxmemory-policy"), bulk("volatile-lfu"))]);
        assert!(check("h:1", Ok(map)).is_err(), "RESP3 answers are read too");
    }

    #[test]
    fn a_refused_config_get_passes_with_a_warning() {
        let noperm = redis::RedisError::from((redis::ErrorKind::Client, "NOPERM", "no permission".to_owned()));
        assert!(check("h:1", Err(noperm)).is_ok());
    }
}
