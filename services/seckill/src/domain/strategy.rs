use std::{fmt, str::FromStr};

/// How a sale protects its stock; chosen per sale, so strategies can be compared side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StrategyKind {
    /// `none` on the wire: read, then write, no lock; oversells under load. The control.
    NoLock,
    /// Redis shard locks around read-then-write, no fencing: safe until a holder outlives its lease.
    RedisLock,
    /// Redis shard locks plus fenced writes: safe also when a lease is lost.
    ShardedFenced,
    /// One conditional `UPDATE ... WHERE remaining >= q`; no lock at all.
    DbAtomic,
    /// `SELECT ... FOR UPDATE` in a transaction.
    DbPessimistic,
    /// Version compare-and-set with bounded retries.
    DbOptimistic,
    /// Each shard owned by one instance through its lock, sold from memory, committed in batches
    /// whose stock write is guarded by the owner's fence. The default.
    OwnedShards,
    /// `owned-shards` without the `fence = t` predicate on the batch's stock write: the control
    /// that shows the fence carries the safety. For tests and chaos only; it oversells.
    OwnedUnfenced,
    /// Redis Lua pre-deduction, the industry's usual design: a script decides (stock, per-user
    /// limit, idempotency key) in Redis, the order goes to a Redis Stream, and a consumer writes it
    /// to PostgreSQL later. Acknowledged after the stream write: fast, and it can lose an
    /// acknowledged order (see [`lab::gate`](crate::lab::gate)).
    RedisGate,
    /// `redis-gate` acknowledged only after PostgreSQL has the order: slower, loses none.
    RedisGateDurable,
}

impl StrategyKind {
    /// Every strategy, in the order the comparison reports them.
    pub const ALL: [StrategyKind; 10] = [
        Self::NoLock,
        Self::RedisLock,
        Self::ShardedFenced,
        Self::DbAtomic,
        Self::DbPessimistic,
        Self::DbOptimistic,
        Self::OwnedShards,
        Self::OwnedUnfenced,
        Self::RedisGate,
        Self::RedisGateDurable,
    ];

    /// The wire name (`sharded-fenced`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoLock => "none",
            Self::RedisLock => "redis-lock",
            Self::ShardedFenced => "sharded-fenced",
            Self::DbAtomic => "db-atomic",
            Self::DbPessimistic => "db-pessimistic",
            Self::DbOptimistic => "db-optimistic",
            Self::OwnedShards => "owned-shards",
            Self::OwnedUnfenced => "owned-unfenced",
            Self::RedisGate => "redis-gate",
            Self::RedisGateDurable => "redis-gate-durable",
        }
    }

    /// For the owned strategies, whether batch writes are fenced; `None` for the per-request ones.
    pub fn owned_fencing(self) -> Option<Fencing> {
        match self {
            Self::OwnedShards => Some(Fencing::Fenced),
            Self::OwnedUnfenced => Some(Fencing::Unfenced),
            _ => None,
        }
    }

    /// For the `redis-gate` strategies, when an order is acknowledged; `None` for the others.
    pub fn gate_ack(self) -> Option<GateAck> {
        match self {
            Self::RedisGate => Some(GateAck::Stream),
            Self::RedisGateDurable => Some(GateAck::Database),
            _ => None,
        }
    }
}

/// When a `redis-gate` order is acknowledged to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GateAck {
    /// Once the order is in the Redis Stream (`redis-gate`).
    Stream,
    /// Once the stream's consumer committed it to PostgreSQL (`redis-gate-durable`).
    Database,
}

/// Whether an owner's batch writes carry the `fence = t` predicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fencing {
    /// They do: a deposed owner's batch changes nothing.
    Fenced,
    /// They do not (the `owned-unfenced` control).
    Unfenced,
}

impl FromStr for StrategyKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|k| k.as_str()).collect();
            format!("strategy must be one of {}", names.join(", "))
        })
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::StrategyKind;

    #[test]
    fn names_round_trip() {
        for kind in StrategyKind::ALL {
            assert_eq!(kind.as_str().parse::<StrategyKind>().unwrap(), kind);
        }
        assert!("redlock".parse::<StrategyKind>().is_err());
    }
}
