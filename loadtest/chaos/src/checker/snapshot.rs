//! The sale as PostgreSQL has it, read in one repeatable-read transaction: [`Snapshot`] and its
//! rows ([`ShardRow`], [`OrderRow`] with its [`OrderState`], [`PartRow`], [`ClaimRow`],
//! [`ReturnRow`]). What is checked against it lives in `checks`.

use anyhow::Result;

/// One shard row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRow {
    /// Index.
    pub shard: i32,
    /// Initial stock.
    pub initial: i64,
    /// Units left.
    pub remaining: i64,
    /// Highest fence accepted.
    pub fence: i64,
}

/// Where an order is in its lifecycle (`orders.state`). The checker's own reading of the column,
/// not seckill's type: the suite links nothing of the service it judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderState {
    /// Bought, not paid yet: holds its units.
    Reserved,
    /// Paid (final), or bought in a sale whose orders are final when bought.
    Paid,
    /// Cancelled by its buyer: its units came back.
    Cancelled,
    /// Its payment window closed: its units came back.
    Expired,
}

impl OrderState {
    /// Parses `orders.state`.
    pub fn parse(state: &str) -> Result<Self> {
        Ok(match state {
            "reserved" => Self::Reserved,
            "paid" => Self::Paid,
            "cancelled" => Self::Cancelled,
            "expired" => Self::Expired,
            other => anyhow::bail!("unknown order state {other:?}"),
        })
    }

    /// `orders.state` as stored and answered.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reserved => "reserved",
            Self::Paid => "paid",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
        }
    }

    /// Whether the order still holds its units (it did not end by returning them).
    pub fn holds_stock(self) -> bool {
        matches!(self, Self::Reserved | Self::Paid)
    }
}

/// One order row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRow {
    /// Order id.
    pub id: i64,
    /// Its idempotency key.
    pub key: Option<String>,
    /// Buyer.
    pub user: String,
    /// Units.
    pub quantity: i64,
    /// `redis-gate` orders: the reference the client was given as its order id.
    pub gate_ref: Option<i64>,
    /// Where it is in its lifecycle.
    pub state: OrderState,
    /// While it could be paid: when its window closed (µs since the epoch, PostgreSQL's clock).
    pub pay_by_us: Option<i64>,
    /// When it was paid, cancelled or expired (µs, PostgreSQL's clock).
    pub settled_us: Option<i64>,
}

impl OrderRow {
    /// Units it holds: its quantity, or none once it ended and returned them.
    pub fn held(&self) -> i64 {
        if self.state.holds_stock() {
            self.quantity
        } else {
            0
        }
    }
}

/// One `stock_returns` row: an order part of a cancelled or expired order giving its units back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReturnRow {
    /// The order.
    pub order_id: i64,
    /// The shard the units go back to.
    pub shard: i32,
    /// Units.
    pub quantity: i64,
    /// The fence of the owner whose claim or batch folded it into the stock (`None`: pending).
    pub applied_fence: Option<i64>,
}

impl OrderRow {
    /// The id a client was acknowledged: the `redis-gate` reference, else the row's id.
    pub fn acknowledged_id(&self) -> i64 {
        self.gate_ref.unwrap_or(self.id)
    }
}

/// One `order_parts` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRow {
    /// The order.
    pub order_id: i64,
    /// The shard the units came from.
    pub shard: i32,
    /// Units.
    pub quantity: i64,
    /// Fence it was written under (0 when unfenced).
    pub fence: i64,
    /// When its order row was written (µs since the epoch, PostgreSQL's clock).
    pub written_us: Option<i64>,
    /// Until when its owner counted on its lease when it sent the batch (µs since the epoch, the
    /// owner's clock; `None` for strategies without owners).
    pub lease_until_us: Option<i64>,
}

/// One `fence_refusals` row: a shard of an owned batch the fence refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusalRow {
    /// The shard.
    pub shard: i32,
    /// The fence the batch carried.
    pub fence: i64,
    /// Until when its owner counted on its lease when it sent the batch (µs, the owner's clock).
    pub lease_until_us: Option<i64>,
    /// When the fence refused it (µs since the epoch, PostgreSQL's clock, after the row lock).
    pub refused_us: i64,
}

/// One `shard_claims` row: an owner took a shard over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRow {
    /// The shard.
    pub shard: i32,
    /// The owner's fence.
    pub fence: i64,
    /// When (µs since the epoch, PostgreSQL's clock).
    pub claimed_us: i64,
}

/// A sale as PostgreSQL has it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Units for sale.
    pub total: i64,
    /// Per-user limit.
    pub per_user_limit: i64,
    /// Claims and writes refused by fences (stale holders stopped).
    pub fence_rejections: i64,
    /// Shards.
    pub shards: Vec<ShardRow>,
    /// Orders.
    pub orders: Vec<OrderRow>,
    /// Order parts.
    pub parts: Vec<PartRow>,
    /// Owner claims (owned strategies), in time order.
    pub claims: Vec<ClaimRow>,
    /// Batch writes the fence refused (owned strategies).
    pub refusals: Vec<RefusalRow>,
    /// `user_purchases`: units bought per user.
    pub purchases: Vec<(String, i64)>,
    /// Returns of cancelled and expired orders.
    pub returns: Vec<ReturnRow>,
}

impl Snapshot {
    /// Reads sale `sku` (which must exist) in one repeatable-read transaction.
    pub async fn load(db: &mut tokio_postgres::Client, sku: &str) -> Result<Self> {
        let tx = db
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let sale = tx.query_one("SELECT total::bigint, per_user_limit::bigint, seckill_fence_rejections(sku) FROM sales WHERE sku = $1", &[&sku]).await?;
        let shards = tx
            .query("SELECT shard, initial::bigint, remaining::bigint, fence FROM shards WHERE sku = $1 ORDER BY shard", &[&sku])
            .await?
            .iter()
            .map(|r| ShardRow { shard: r.get(0), initial: r.get(1), remaining: r.get(2), fence: r.get(3) })
            .collect();
        let orders = tx
            .query(
                "SELECT id, idempotency_key, user_id, quantity::bigint, gate_ref, state,
                        (extract(epoch FROM pay_by) * 1e6)::bigint, (extract(epoch FROM settled_at) * 1e6)::bigint
                   FROM orders WHERE sku = $1 ORDER BY id",
                &[&sku],
            )
            .await?
            .iter()
            .map(|r| {
                Ok(OrderRow {
                    id: r.get(0),
                    key: r.get(1),
                    user: r.get(2),
                    quantity: r.get(3),
                    gate_ref: r.get(4),
                    state: OrderState::parse(r.get(5))?,
                    pay_by_us: r.get(6),
                    settled_us: r.get(7),
                })
            })
            .collect::<Result<_>>()?;
        let parts = tx
            .query(
                "SELECT p.order_id, p.shard, p.quantity::bigint, p.fence, (extract(epoch FROM o.written_at) * 1e6)::bigint,
                        (extract(epoch FROM p.lease_until) * 1e6)::bigint
                   FROM order_parts p JOIN orders o ON o.id = p.order_id
                  WHERE p.sku = $1 ORDER BY p.order_id, p.shard",
                &[&sku],
            )
            .await?
            .iter()
            .map(|r| PartRow {
                order_id: r.get(0),
                shard: r.get(1),
                quantity: r.get(2),
                fence: r.get(3),
                written_us: r.get(4),
                lease_until_us: r.get(5),
            })
            .collect();
        let claims = tx
            .query(
                "SELECT shard, fence, (extract(epoch FROM claimed_at) * 1e6)::bigint FROM shard_claims
                  WHERE sku = $1 ORDER BY claimed_at",
                &[&sku],
            )
            .await?
            .iter()
            .map(|r| ClaimRow { shard: r.get(0), fence: r.get(1), claimed_us: r.get(2) })
            .collect();
        let refusals = tx
            .query(
                "SELECT shard, fence, (extract(epoch FROM lease_until) * 1e6)::bigint, (extract(epoch FROM refused_at) * 1e6)::bigint
                   FROM fence_refusals WHERE sku = $1 ORDER BY refused_at",
                &[&sku],
            )
            .await?
            .iter()
            .map(|r| RefusalRow { shard: r.get(0), fence: r.get(1), lease_until_us: r.get(2), refused_us: r.get(3) })
            .collect();
        let purchases = tx
            .query(
                "SELECT user_id, bought::bigint FROM user_purchases WHERE sku = $1",
                &[&sku],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let returns = tx
            .query(
                "SELECT order_id, shard, quantity::bigint, applied_fence FROM stock_returns WHERE sku = $1 ORDER BY order_id, shard",
                &[&sku],
            )
            .await?
            .iter()
            .map(|r| ReturnRow { order_id: r.get(0), shard: r.get(1), quantity: r.get(2), applied_fence: r.get(3) })
            .collect();
        tx.commit().await?;
        Ok(Self {
            total: sale.get(0),
            per_user_limit: sale.get(1),
            fence_rejections: sale.get(2),
            shards,
            orders,
            parts,
            claims,
            refusals,
            purchases,
            returns,
        })
    }

    /// Units in orders that hold them (cancelled and expired orders gave theirs back).
    pub fn sold(&self) -> i64 {
        self.orders.iter().map(OrderRow::held).sum()
    }
}
