//! The Lua scripts of `redis-gate` and their Rust faces: `decide` (the whole decision, the
//! decrement and the stream write, in one script) and `seed` (a sale's keys from PostgreSQL's
//! truth). Each runs atomically in Redis; each touches only keys of one sale.

use std::sync::LazyLock;

use redis::{Script, aio::ConnectionManager};

use super::{keys::GateKeys, staged_users::StagedUsers};
use crate::{
    domain::{GateAck, OrderRequest, Sale, ShardId},
    selling::InventoryError,
};

/// The whole decision in one script: checks the generation, answers a known idempotency key with
/// its order, checks the per-user limit and the stock, then takes the units (shard by shard from
/// a random start, so concurrent orders spread over the shards and the last units are gathered
/// from several), counts them for the user, hands out a reference, remembers the key and appends
/// the order to the sale's stream. Redis runs it atomically, so a key it remembers always names
/// an order in the stream (or already written from it): there is no moment at which units are
/// taken but no order exists, and a replay answers only an order that will be written.
///
/// This is the shape of the widely copied Redis Stream flash-sale designs (one script checks the
/// stock and the buyer, decrements and `XADD`s the order for an asynchronous writer), and it is
/// one round trip per order.
static DECIDE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local gen = redis.call('HGET', KEYS[1], 'gen')
if not gen then return {'unseeded'} end
if gen ~= ARGV[1] then return {'stale'} end
local user, qty, key = ARGV[2], tonumber(ARGV[3]), ARGV[4]
if key ~= '' then
  local prior = redis.call('HGET', KEYS[4], key)
  if prior then return {'replay', prior} end
end
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit'))
local bought = tonumber(redis.call('HGET', KEYS[3], user) or '0')
if bought + qty > limit then return {'user_limit'} end
if tonumber(redis.call('HGET', KEYS[1], 'left') or '0') < qty then return {'sold_out'} end
local n = tonumber(redis.call('HGET', KEYS[1], 'shards'))
local start = tonumber(ARGV[5])
local need, parts, flat = qty, {}, {}
for i = 0, n - 1 do
  local s = (start + i) % n
  local have = tonumber(redis.call('HGET', KEYS[2], s) or '0')
  if have > 0 then
    local take = math.min(have, need)
    table.insert(parts, {s, take})
    table.insert(flat, s .. ':' .. take)
    need = need - take
    if need == 0 then break end
  end
end
if need > 0 then return redis.error_reply('gate: shard stock below the left counter') end
for _, p in ipairs(parts) do redis.call('HINCRBY', KEYS[2], p[1], -p[2]) end
redis.call('HINCRBY', KEYS[1], 'left', -qty)
redis.call('HINCRBY', KEYS[3], user, qty)
local ref = redis.call('INCR', KEYS[5])
local joined = table.concat(flat, ',')
if key ~= '' then redis.call('HSET', KEYS[4], key, ref .. '|' .. qty .. '|' .. parts[1][1] .. '|' .. user) end
redis.call('XADD', KEYS[6], '*', 'ref', ref, 'gen', gen, 'user', user, 'qty', qty, 'key', key, 'parts', joined, 'ack', ARGV[6])
return {'taken', tostring(ref), joined}
",
    )
});

/// Lua shared by [`seed`] and the reconciliation's repair:
/// - `write_sale(gen, limit, n, stock_at)` writes the `n` shard stocks found at
///   `ARGV[stock_at + 1..]` into KEYS[2] and the sale's meta (generation, limit, shards, units
///   left) into KEYS[1];
/// - `replace_users(users, staged)` makes the buyers copied into `staged` (see `staged_users`) the
///   sale's hash of buyers, persistent, or empties it when the copy found none.
pub(super) const WRITE_SALE: &str = r"
local function write_sale(gen, limit, n, stock_at)
  local left = 0
  for i = 1, n do
    local v = tonumber(ARGV[stock_at + i])
    redis.call('HSET', KEYS[2], i - 1, v)
    left = left + v
  end
  redis.call('HSET', KEYS[1], 'gen', gen, 'limit', limit, 'shards', n, 'left', left)
end
local function replace_users(users, staged)
  if redis.call('EXISTS', staged) == 1 then
    redis.call('RENAME', staged, users)
    redis.call('PERSIST', users)
  else
    redis.call('DEL', users)
  end
end
";

/// Seeds a sale: `reset` replaces stock, users and idempotency keys;
/// otherwise only if the sale is not seeded (Redis lost it). The reference counter is raised to
/// the floor given (above every earlier reference: see [`Seed::ref_floor`]), never lowered. The
/// buyers come from their staged copy (KEYS[6]), dropped when it is not used. ARGV: gen, limit,
/// shards, reset (1/0), floor, then shard stocks.
static SEED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{WRITE_SALE}{}",
        r"
if ARGV[4] ~= '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[6])
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[4])
replace_users(KEYS[3], KEYS[6])
write_sale(ARGV[1], ARGV[2], tonumber(ARGV[3]), 5)
if tonumber(redis.call('GET', KEYS[5]) or '0') < tonumber(ARGV[5]) then redis.call('SET', KEYS[5], ARGV[5]) end
return 1
"
    ))
});

/// What the decision came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The units are taken and the order is in the stream, with this reference and these parts.
    Taken {
        /// The order's reference (unique per sale).
        gate_ref: i64,
        /// Shards and units.
        parts: Vec<(ShardId, u32)>,
    },
    /// The idempotency key already made this order.
    Replay(PriorOrder),
    /// The user would exceed the per-user limit.
    UserLimit,
    /// Fewer units left than asked.
    SoldOut,
    /// Redis holds another generation of the sale.
    Stale,
    /// Redis has no keys for the sale.
    Unseeded,
}

/// The order an idempotency key made, as Redis remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorOrder {
    /// Its reference.
    pub gate_ref: i64,
    /// Units.
    pub quantity: u32,
    /// Its first shard.
    pub shard: ShardId,
    /// The buyer.
    pub user_id: String,
}

fn malformed(what: &str) -> InventoryError {
    InventoryError::Bug(format!("gate script answered a malformed {what}"))
}

/// Decides `request` and, when taken, enqueues it (one round trip). `ack` is written into the
/// entry, so the writer knows whether a request waits for its commit.
pub async fn decide(
    redis: &ConnectionManager,
    keys: &GateKeys,
    sale: &Sale,
    request: &OrderRequest,
    start: u32,
    ack: GateAck,
) -> Result<Decision, InventoryError> {
    let reply: Vec<String> = DECIDE
        .key(&keys.meta)
        .key(&keys.stock)
        .key(&keys.users)
        .key(&keys.keys)
        .key(&keys.seq)
        .key(&keys.stream)
        .arg(sale.generation)
        .arg(request.user_id.as_str())
        .arg(request.quantity.get())
        .arg(request.idempotency_key.as_deref().unwrap_or(""))
        .arg(start)
        .arg(ack_field(ack))
        .invoke_async(&mut redis.clone())
        .await?;
    Ok(match reply.first().map(String::as_str) {
        Some("taken") => {
            let gate_ref = reply.get(1).and_then(|r| r.parse().ok()).ok_or_else(|| malformed("reference"))?;
            let parts = parse_parts(reply.get(2).map_or("", String::as_str)).ok_or_else(|| malformed("parts"))?;
            Decision::Taken { gate_ref, parts }
        }
        Some("replay") => Decision::Replay(reply.get(1).and_then(|p| parse_prior(p)).ok_or_else(|| malformed("prior order"))?),
        Some("user_limit") => Decision::UserLimit,
        Some("sold_out") => Decision::SoldOut,
        Some("stale") => Decision::Stale,
        Some("unseeded") => Decision::Unseeded,
        _ => return Err(malformed("decision")),
    })
}

/// The stream entry's `ack` field: `database` when a request waits for the entry's commit.
pub(crate) fn ack_field(ack: GateAck) -> &'static str {
    match ack {
        GateAck::Stream => "stream",
        GateAck::Database => "database",
    }
}

/// What a sale's keys are seeded with.
#[derive(Debug)]
pub struct Seed {
    /// Units left per shard, in shard order.
    pub stock: Vec<i64>,
    /// Units bought per user, copied into Redis already.
    pub(super) users: StagedUsers,
    /// The floor of the reference counter: above every reference handed out before (the highest
    /// in PostgreSQL, and the sale's new gate epoch shifted up).
    pub ref_floor: i64,
}

/// Seeds the sale's keys: always when `reset`, else only if Redis has none. True if it wrote.
pub async fn seed(redis: &ConnectionManager, keys: &GateKeys, sale: &Sale, seed: &Seed, reset: bool) -> Result<bool, InventoryError> {
    let mut invocation = SEED.prepare_invoke();
    for key in [&keys.meta, &keys.stock, &keys.users, &keys.keys, &keys.seq, &seed.users.0] {
        invocation.key(key);
    }
    invocation
        .arg(sale.generation)
        .arg(sale.spec.per_user_limit)
        .arg(seed.stock.len())
        .arg(if reset { "1" } else { "0" })
        .arg(seed.ref_floor);
    for stock in &seed.stock {
        invocation.arg(*stock);
    }
    let wrote: i64 = invocation.invoke_async(&mut redis.clone()).await?;
    Ok(wrote == 1)
}

/// `shard:take,shard:take` as the scripts write parts.
pub fn format_parts(parts: &[(ShardId, u32)]) -> String {
    parts.iter().map(|(s, t)| format!("{}:{t}", s.get())).collect::<Vec<_>>().join(",")
}

/// Parses [`format_parts`]; `None` if malformed or empty.
pub fn parse_parts(raw: &str) -> Option<Vec<(ShardId, u32)>> {
    let parts: Option<Vec<_>> = raw
        .split(',')
        .map(|p| {
            let (shard, take) = p.split_once(':')?;
            Some((ShardId::new(shard.parse().ok()?), take.parse().ok()?))
        })
        .collect();
    parts.filter(|p| !p.is_empty())
}

/// Parses `ref|quantity|shard|user` (the user last: it may contain `|`).
fn parse_prior(raw: &str) -> Option<PriorOrder> {
    let mut fields = raw.splitn(4, '|');
    Some(PriorOrder {
        gate_ref: fields.next()?.parse().ok()?,
        quantity: fields.next()?.parse().ok()?,
        shard: ShardId::new(fields.next()?.parse().ok()?),
        user_id: fields.next()?.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_round_trip() {
        let parts = vec![(ShardId::new(3), 1), (ShardId::new(0), 2)];
        assert_eq!(parse_parts(&format_parts(&parts)), Some(parts));
        assert_eq!(parse_parts(""), None);
        assert_eq!(parse_parts("1:x"), None);
    }

    #[test]
    fn a_prior_order_keeps_a_user_with_bars() {
        let prior = parse_prior("17|2|4|a|b").unwrap();
        assert_eq!(prior, PriorOrder { gate_ref: 17, quantity: 2, shard: ShardId::new(4), user_id: "a|b".into() });
    }
}
