//! The plain lock's release without a script, on a server that has a compare-and-delete command:
//! `DELIFEQ key value` (Valkey 9.0) or `DELEX key IFEQ value` (Redis 8.4, Valkey 9.2).
//!
//! Why: on Redis 7.0 most of a script call's server CPU is the call itself, not its commands
//! (`INFO commandstats` during `lockctl bench`, Redis 7.0.15: 3.4-5.2 µs per `EVALSHA` of the
//! plain lock, of which its commands take under 1 µs; an `EVALSHA` of `return 1` alone costs
//! 1.6-3.5 µs), so a release by one command is the largest saving left to a fenced lock. The
//! acquire keeps its script: `SET NX` and `INCR` of the fence must be one step.
//!
//! The command is found once per server with `COMMAND INFO DELIFEQ DELEX` (an unknown command
//! answers nil there, never an error); without either, the release stays the owner-checked script.
//! The wake-up still reaches waiters: an `EXISTS` of the waiter mark is pipelined after the delete,
//! and a `PUBLISH` follows when it is set. A waiter sets the mark in the same script as the attempt
//! that found the lock held, so either the attempt came before the delete (and the mark is seen),
//! or after it (and the attempt found the lock free, or held by someone whose own release sees
//! the mark).

use redis::{Value, aio::ConnectionLike};

use super::scripts;
use crate::model::keys::LockKeys;

/// The compare-and-delete command a server has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompareDelete {
    /// `DELIFEQ key value` (Valkey 9.0).
    DelIfEq,
    /// `DELEX key IFEQ value` (Redis 8.4, Valkey 9.2).
    DelEx,
}

/// `COMMAND INFO DELIFEQ DELEX`: one entry per name, nil where the server does not know it.
pub(crate) fn probe() -> redis::Cmd {
    let mut cmd = redis::cmd("COMMAND");
    cmd.arg("INFO").arg("DELIFEQ").arg("DELEX");
    cmd
}

/// Which command the answer to [`probe`] offers (`DELIFEQ` first: it is the older one, and takes
/// no option). `None` on a server that knows neither, or on an answer of another shape.
pub(crate) fn parse(reply: &Value) -> Option<CompareDelete> {
    let Value::Array(entries) = reply else { return None };
    let known = |entry: Option<&Value>, name: &str| match entry {
        Some(Value::Array(info)) => match info.first() {
            Some(Value::BulkString(bytes)) => bytes.eq_ignore_ascii_case(name.as_bytes()),
            Some(Value::SimpleString(text)) => text.eq_ignore_ascii_case(name),
            _ => false,
        },
        _ => false,
    };
    if known(entries.first(), "delifeq") {
        Some(CompareDelete::DelIfEq)
    } else if known(entries.get(1), "delex") {
        Some(CompareDelete::DelEx)
    } else {
        None
    }
}

/// Deletes the lock key if it still holds `token`, and wakes waiters if any announced themselves.
/// True when it was ours. A key of another type (a primitive's) is not ours: the server refuses it
/// with `WRONGTYPE` and deletes nothing.
pub(crate) async fn release(
    conn: &mut impl ConnectionLike,
    how: CompareDelete,
    keys: &LockKeys,
    token: &str,
) -> redis::RedisResult<bool> {
    let mut pipe = redis::pipe();
    match how {
        CompareDelete::DelIfEq => pipe.cmd("DELIFEQ").arg(&keys.lock).arg(token),
        CompareDelete::DelEx => pipe.cmd("DELEX").arg(&keys.lock).arg("IFEQ").arg(token),
    };
    pipe.cmd("EXISTS").arg(scripts::waiter_mark(keys));
    let (deleted, waiting): (i64, i64) = match pipe.query_async(conn).await {
        Err(e) if e.code() == Some("WRONGTYPE") => return Ok(false),
        result => result?,
    };
    if deleted == 1 && waiting == 1 {
        redis::cmd("PUBLISH").arg(&keys.released).arg("1").query_async::<()>(conn).await?;
    }
    Ok(deleted == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str) -> Value {
        // The head of a real entry: name, arity, flags, ...
        Value::Array(vec![Value::BulkString(name.as_bytes().to_vec()), Value::Int(3), Value::Array(vec![])])
    }

    #[test]
    fn a_server_without_either_command_keeps_the_script() {
        // Redis 7.0 and 8.2 answer nil for each unknown name.
        assert_eq!(parse(&Value::Array(vec![Value::Nil, Value::Nil])), None);
        assert_eq!(parse(&Value::Nil), None);
        assert_eq!(parse(&Value::Array(vec![])), None);
    }

    #[test]
    fn valkey_9_uses_delifeq_and_redis_8_4_delex() {
        assert_eq!(parse(&Value::Array(vec![info("delifeq"), Value::Nil])), Some(CompareDelete::DelIfEq));
        assert_eq!(parse(&Value::Array(vec![info("delifeq"), info("delex")])), Some(CompareDelete::DelIfEq));
        assert_eq!(parse(&Value::Array(vec![Value::Nil, info("delex")])), Some(CompareDelete::DelEx));
    }

    #[test]
    fn an_entry_for_another_name_is_not_taken_for_the_command() {
        assert_eq!(parse(&Value::Array(vec![info("del"), info("get")])), None);
    }
}
