//! The consumer of one sale's stream on this instance: it reads decided orders in batches
//! (`XREADGROUP ... BLOCK`), writes each batch to PostgreSQL in one transaction
//! (`seckill_gate_write`, idempotent on the order's reference), then acknowledges and deletes
//! the entries (`XACK`, `XDEL`: the stream holds only what is not yet written, so its length is
//! the queue). Every `claim_interval` it takes over entries that any consumer has left
//! unacknowledged for `claim_idle` (`XAUTOCLAIM`): a consumer that crashed mid-batch, or a batch
//! whose write failed. A claimed entry that was in fact written lands once (its reference is
//! unique), so the queue is processed exactly once in effect.
//!
//! Bounded: at most [`BATCH`] entries in memory per read, a read blocks at most until the next
//! claim is due, and the loop checks its stop token between reads, so shutdown waits for at most
//! one read and one batch. A writer whose read found nothing looks whether its sale still needs
//! it (`may_stop`): with the stream empty, a sale sold out, retired from the gate or deleted
//! does not, and the writer stops (see the `registry` module). An idle writer of a sale still
//! selling costs Redis one read that waits, one claim and one look per `claim_interval`, and
//! PostgreSQL one look every `SALE_CHECK_EVERY` (10) of them.

use std::{collections::HashMap, sync::Arc, time::Duration};

use redis::{AsyncConnectionConfig, RedisError, Value, aio::MultiplexedConnection};
use tokio_util::sync::CancellationToken;

use super::{
    keys::{GROUP, GateKeys},
    notices::format_notice,
    registry::Registry,
    script::{ack_field, parse_parts},
    waiters::Waiters,
};
use crate::{
    domain::{GateAck, Sku},
    store::{Db, GateEntry, GateWritten},
};

/// Most entries read (and written in one transaction) at once.
pub const BATCH: usize = 256;

/// Shortest wait of a read for new entries (Redis reads `BLOCK 0` as "forever").
const MIN_BLOCK: Duration = Duration::from_millis(1);

/// How long an answer may take beyond a read's own wait before the connection counts as broken.
const ANSWER_GRACE: Duration = Duration::from_millis(500);

/// An idle writer asks PostgreSQL whether its sale still exists every this many idle reads: a
/// sale deleted there keeps its Redis keys, so Redis alone cannot tell.
const SALE_CHECK_EVERY: u32 = 10;

/// What a writer needs.
#[derive(Clone)]
pub(crate) struct WriterContext {
    /// Opens the writer's own connection: a blocking read must not stall the shared one.
    pub(crate) client: redis::Client,
    pub(crate) db: Db,
    /// Requests waiting for their order to be written (`redis-gate-durable`).
    pub(crate) waiters: Arc<Waiters>,
    /// This instance's consumer name.
    pub(crate) consumer: String,
    /// Entries unacknowledged this long are taken over.
    pub(crate) claim_idle: Duration,
    /// How often to look for such entries.
    pub(crate) claim_interval: Duration,
    /// The running writers, where one unregisters before it stops.
    pub(crate) registry: Registry,
}

/// Runs the writer of `sku` until `stop` is cancelled.
pub(crate) async fn run(sku: Sku, ctx: WriterContext, stop: CancellationToken) {
    let keys = GateKeys::new(&sku);
    // Connected on first use and again after the connection broke (a Redis restart): a writer
    // that kept a dead connection would leave every later order unwritten.
    let mut conn: Option<MultiplexedConnection> = None;
    let mut group_ready = false;
    let mut last_claim: Option<tokio::time::Instant> = None;
    let mut idle_reads = 0u32;
    while !stop.is_cancelled() {
        let Some(live) = conn.as_mut() else {
            // A read waits up to `claim_interval` by design: only what goes beyond is a timeout.
            let config = AsyncConnectionConfig::new().set_response_timeout(Some(ctx.claim_interval + ANSWER_GRACE));
            match ctx.client.get_multiplexed_async_connection_with_config(&config).await {
                Ok(fresh) => {
                    conn = Some(fresh);
                    // A restarted Redis has neither the stream nor the group.
                    group_ready = false;
                }
                Err(e) => {
                    tracing::warn!(%sku, error = %e, "gate writer cannot connect to redis; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(500)) => {}
                        () = stop.cancelled() => return,
                    }
                }
            }
            continue;
        };
        if !group_ready {
            match create_group(live, &keys).await {
                Ok(()) => group_ready = true,
                Err(e) => {
                    tracing::warn!(%sku, error = %e, "gate writer cannot create its consumer group; retrying");
                    if is_connection_lost(&e) {
                        conn = None;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
        }
        let until_claim = last_claim.map_or(Duration::ZERO, |at| ctx.claim_interval.saturating_sub(at.elapsed()));
        let read = if until_claim.is_zero() {
            last_claim = Some(tokio::time::Instant::now());
            autoclaim(live, &keys, &ctx).await
        } else {
            read_new(live, &keys, &ctx, until_claim.max(MIN_BLOCK)).await
        };
        match read {
            Ok(entries) if entries.is_empty() => {
                idle_reads = idle_reads.wrapping_add(1);
                // Read before looking: an order enqueued after the look raises it.
                let seen = ctx.registry.wanted(&sku);
                match may_stop(live, &keys, &ctx, &sku, idle_reads).await {
                    Ok(true) if ctx.registry.retire(&sku, seen) => {
                        tracing::debug!(%sku, "gate writer stops: its sale needs it no more");
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        if is_connection_lost(&e) {
                            conn = None;
                        }
                    }
                }
            }
            Ok(entries) => {
                idle_reads = 0;
                write(&sku, live, &keys, &ctx, entries).await;
            }
            Err(e) if e.code() == Some("NOGROUP") => group_ready = false,
            Err(e) => {
                tracing::warn!(%sku, error = %e, "gate writer cannot read its stream; retrying");
                if is_connection_lost(&e) {
                    conn = None;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Whether the sale needs its writer no more: nothing in its stream (pending or unread), and it
/// is sold out, or its keys are gone (retired from the gate, or lost with Redis: the next order
/// seeds them and starts a writer), or (asked every [`SALE_CHECK_EVERY`] idle reads) PostgreSQL
/// no longer has it as a gate sale. A failed look in PostgreSQL keeps the writer.
async fn may_stop(
    conn: &mut MultiplexedConnection,
    keys: &GateKeys,
    ctx: &WriterContext,
    sku: &Sku,
    idle_reads: u32,
) -> Result<bool, RedisError> {
    let (queued, generation, left): (i64, Option<i64>, Option<i64>) =
        redis::pipe().atomic().cmd("XLEN").arg(&keys.stream).hget(&keys.meta, "gen").hget(&keys.meta, "left").query_async(conn).await?;
    if queued > 0 {
        return Ok(false);
    }
    if generation.is_none() || left.is_some_and(|left| left <= 0) {
        return Ok(true);
    }
    if !idle_reads.is_multiple_of(SALE_CHECK_EVERY) {
        return Ok(false);
    }
    match ctx.db.sale(sku).await {
        Ok(sale) => Ok(sale.is_none_or(|sale| sale.spec.strategy.gate_ack().is_none())),
        Err(e) => {
            tracing::debug!(%sku, error = %e, "gate writer cannot look its sale up; keeps running");
            Ok(false)
        }
    }
}

/// Whether `e` means the connection itself is gone (reconnect), not a refused command.
fn is_connection_lost(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// One raw stream entry: its id and fields.
type RawEntry = (String, HashMap<String, String>);

async fn create_group(conn: &mut MultiplexedConnection, keys: &GateKeys) -> Result<(), RedisError> {
    let created: Result<(), RedisError> =
        redis::cmd("XGROUP").arg("CREATE").arg(&keys.stream).arg(GROUP).arg("0").arg("MKSTREAM").query_async(conn).await;
    match created {
        Err(e) if e.code() != Some("BUSYGROUP") => Err(e),
        _ => Ok(()),
    }
}

/// Reads new entries, waiting up to `block` for the first: it returns as soon as one arrives.
async fn read_new(
    conn: &mut MultiplexedConnection,
    keys: &GateKeys,
    ctx: &WriterContext,
    block: Duration,
) -> Result<Vec<RawEntry>, RedisError> {
    let reply: Option<Vec<(String, Vec<RawEntry>)>> = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(GROUP)
        .arg(&ctx.consumer)
        .arg("COUNT")
        .arg(BATCH)
        .arg("BLOCK")
        .arg(block.as_millis() as u64)
        .arg("STREAMS")
        .arg(&keys.stream)
        .arg(">")
        .query_async(conn)
        .await?;
    Ok(reply.into_iter().flatten().flat_map(|(_, entries)| entries).collect())
}

/// Takes over entries idle for `claim_idle`, whoever holds them (ourselves included: a batch
/// whose write failed is retried this way). One page of at most [`BATCH`].
async fn autoclaim(conn: &mut MultiplexedConnection, keys: &GateKeys, ctx: &WriterContext) -> Result<Vec<RawEntry>, RedisError> {
    let reply: Vec<Value> = redis::cmd("XAUTOCLAIM")
        .arg(&keys.stream)
        .arg(GROUP)
        .arg(&ctx.consumer)
        .arg(ctx.claim_idle.as_millis() as u64)
        .arg("0-0")
        .arg("COUNT")
        .arg(BATCH)
        .query_async(conn)
        .await?;
    // Redis 6.2 lists entries deleted meanwhile as nil; 7 leaves them out.
    let entries = match reply.into_iter().nth(1) {
        Some(Value::Array(entries)) => entries,
        _ => return Ok(Vec::new()),
    };
    let claimed: Vec<RawEntry> =
        entries.into_iter().filter(|e| !matches!(e, Value::Nil)).filter_map(|e| redis::from_redis_value::<RawEntry>(e).ok()).collect();
    if !claimed.is_empty() {
        metrics::counter!("seckill_gate_claimed_total").increment(claimed.len() as u64);
        tracing::info!(stream = %keys.stream, entries = claimed.len(), "gate writer claimed idle entries");
    }
    Ok(claimed)
}

/// Writes a batch, then acknowledges it and answers its waiters: this instance's at once, the
/// other instances' through a notice published in the same pipeline as the acknowledgement (see
/// the `notices` module). A failed write acknowledges nothing: the entries stay pending and are
/// claimed again after `claim_idle`.
async fn write(sku: &Sku, conn: &mut MultiplexedConnection, keys: &GateKeys, ctx: &WriterContext, raw: Vec<RawEntry>) {
    let ids: Vec<String> = raw.iter().map(|(id, _)| id.clone()).collect();
    let mut entries = Vec::with_capacity(raw.len());
    // Whether a request waits for the entry's commit (`redis-gate-durable`).
    let mut durable = Vec::with_capacity(raw.len());
    for (id, fields) in &raw {
        match parse_entry(fields) {
            Some(entry) => {
                entries.push(entry);
                durable.push(fields.get("ack").is_some_and(|ack| ack == ack_field(GateAck::Database)));
            }
            // A bug upstream; retrying cannot help, so it is logged and acknowledged.
            None => tracing::error!(%sku, id, ?fields, "malformed gate stream entry dropped"),
        }
    }
    metrics::histogram!("seckill_gate_batch_orders").record(entries.len() as f64);
    let outcomes = match ctx.db.gate_write(sku, &entries).await {
        Ok(outcomes) => outcomes,
        Err(e) => {
            tracing::warn!(%sku, error = %e, entries = entries.len(), "gate batch write failed; the entries stay pending");
            return;
        }
    };
    let notice: Vec<String> = entries
        .iter()
        .zip(&outcomes)
        .zip(&durable)
        .filter(|(_, durable)| **durable)
        .map(|((entry, outcome), _)| format_notice(entry.gate_ref, *outcome, &entry.user_id))
        .collect();
    let mut pipe = redis::pipe();
    pipe.cmd("XACK").arg(&keys.stream).arg(GROUP).arg(&ids).ignore().cmd("XDEL").arg(&keys.stream).arg(&ids).ignore();
    if !notice.is_empty() {
        pipe.cmd("PUBLISH").arg(&keys.written).arg(notice.join("\n")).ignore();
    }
    let acked: Result<(), RedisError> = pipe.query_async(conn).await;
    if let Err(e) = acked {
        // Written but not acknowledged: claimed again later and found written (no double write).
        tracing::warn!(%sku, error = %e, "gate batch written but not acknowledged");
    }
    for (entry, outcome) in entries.iter().zip(outcomes) {
        if outcome == GateWritten::Stale {
            metrics::counter!("seckill_gate_stale_total").increment(1);
        }
        ctx.waiters.fire(sku, entry.gate_ref, &entry.user_id, outcome);
    }
}

/// A stream entry's fields as an entry to write; `None` if malformed.
pub(crate) fn parse_entry(fields: &HashMap<String, String>) -> Option<GateEntry> {
    let get = |name: &str| fields.get(name).map(String::as_str);
    Some(GateEntry {
        gate_ref: get("ref")?.parse().ok()?,
        generation: get("gen")?.parse().ok()?,
        user_id: get("user")?.to_owned(),
        quantity: get("qty")?.parse().ok()?,
        idempotency_key: get("key").filter(|k| !k.is_empty()).map(str::to_owned),
        parts: parse_parts(get("parts")?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ShardId;

    #[test]
    fn an_entry_parses_with_or_without_a_key() {
        let mut fields: HashMap<String, String> =
            [("ref", "7"), ("gen", "42"), ("user", "u 1"), ("qty", "2"), ("key", ""), ("parts", "1:1,2:1")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
        let entry = parse_entry(&fields).unwrap();
        assert_eq!(entry.idempotency_key, None);
        assert_eq!(entry.parts, vec![(ShardId::new(1), 1), (ShardId::new(2), 1)]);
        fields.insert("key".into(), "k".into());
        assert_eq!(parse_entry(&fields).unwrap().idempotency_key.as_deref(), Some("k"));
        fields.remove("parts");
        assert!(parse_entry(&fields).is_none());
    }
}
