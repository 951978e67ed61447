//! Notices of committed entries between instances, for `redis-gate-durable`: the writer that
//! committed a batch publishes the outcomes of its durable entries on the sale's channel, and
//! every instance's one subscriber fires its own waiters of those orders.
//!
//! Why Redis pub/sub: a request waits on the instance that decided its order, but any instance's
//! writer may take the entry, so the commit must reach the other instances. The writer already
//! sends one pipeline to Redis after each commit (`XACK` + `XDEL`), so the `PUBLISH` rides in it
//! at no extra round trip, is sent only after the commit, and costs one command per batch, not
//! per order. PostgreSQL `LISTEN`/`NOTIFY` would tie the notice to the commit just as well, but
//! needs a dedicated connection per instance and a function change, and it never arrives behind
//! PgBouncer's transaction mode. Pub/sub is at most once: a notice sent while an instance's
//! subscriber is reconnecting, or before a request registered its wait, is lost, and the waiter
//! finds its order by its bounded fallback check of PostgreSQL instead (see `Gate::buy`).
//!
//! One pattern subscription per instance (`{seckill:gate:*}:written`), made at start-up, so no
//! order waits for a subscription of its own.

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::waiters::Waiters;
use crate::{domain::Sku, store::GateWritten};

/// The pattern of every sale's channel ([`super::GateKeys::written`]).
const PATTERN: &str = "{seckill:gate:*}:written";

/// How long the subscriber waits before it connects again after losing Redis.
const RECONNECT: Duration = Duration::from_millis(500);

/// One committed durable entry, as published: `ref|outcome|user` (the user last: it has no
/// control characters, so lines separate entries, but it may contain `|`).
pub(crate) fn format_notice(gate_ref: i64, outcome: GateWritten, user: &str) -> String {
    let outcome = match outcome {
        GateWritten::Written(id) => format!("written:{id}"),
        GateWritten::Duplicate => "duplicate".into(),
        GateWritten::Stale => "stale".into(),
        GateWritten::Conflict => "conflict".into(),
    };
    format!("{gate_ref}|{outcome}|{user}")
}

/// Parses one line of a notice; `None` if malformed.
fn parse_notice(line: &str) -> Option<(i64, GateWritten, &str)> {
    let mut fields = line.splitn(3, '|');
    let gate_ref = fields.next()?.parse().ok()?;
    let outcome = match fields.next()? {
        "duplicate" => GateWritten::Duplicate,
        "stale" => GateWritten::Stale,
        "conflict" => GateWritten::Conflict,
        written => GateWritten::Written(written.strip_prefix("written:")?.parse().ok()?),
    };
    Some((gate_ref, outcome, fields.next()?))
}

/// The sale a channel name belongs to.
fn channel_sku(channel: &str) -> Option<Sku> {
    let raw = channel.strip_prefix("{seckill:gate:")?.strip_suffix("}:written")?;
    Sku::parse(raw).ok()
}

/// Runs this instance's subscriber until `stop`: fires the local waiters of every notice.
pub(crate) async fn listen(client: redis::Client, waiters: Arc<Waiters>, stop: CancellationToken) {
    while !stop.is_cancelled() {
        match subscribe(&client).await {
            Ok(mut messages) => loop {
                let message = tokio::select! {
                    message = messages.next() => message,
                    () = stop.cancelled() => return,
                };
                let Some(message) = message else {
                    tracing::warn!("gate notices: lost the subscription; waiters poll PostgreSQL until it is back");
                    break;
                };
                let (Some(sku), Ok(payload)) = (channel_sku(message.get_channel_name()), message.get_payload::<String>()) else {
                    continue;
                };
                for (gate_ref, outcome, user) in payload.lines().filter_map(parse_notice) {
                    waiters.fire(&sku, gate_ref, user, outcome);
                }
            },
            Err(e) => tracing::warn!(error = %e, "gate notices: cannot subscribe; waiters poll PostgreSQL until it is back"),
        }
        tokio::select! {
            () = tokio::time::sleep(RECONNECT) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// A fresh pub/sub connection subscribed to every sale's channel.
async fn subscribe(client: &redis::Client) -> Result<redis::aio::PubSubStream, redis::RedisError> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.psubscribe(PATTERN).await?;
    Ok(pubsub.into_on_message())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_round_trips_with_a_user_with_bars() {
        for outcome in [GateWritten::Written(42), GateWritten::Duplicate, GateWritten::Stale, GateWritten::Conflict] {
            let line = format_notice(7, outcome, "a|b c");
            assert_eq!(parse_notice(&line), Some((7, outcome, "a|b c")));
        }
        assert_eq!(parse_notice("7|written:x|u"), None);
        assert_eq!(channel_sku("{seckill:gate:phone-1}:written"), Some(Sku::parse("phone-1").unwrap()));
    }
}
