use std::time::Duration;

use serde::Deserialize;

use super::{Sku, StrategyKind};

/// The body of `PUT /v1/sales/{sku}` as sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaleSpecBody {
    total: i64,
    shards: i64,
    per_user_limit: i64,
    max_per_order: i64,
    #[serde(default)]
    strategy: Option<String>,
    #[serde(default)]
    payment_window_ms: Option<i64>,
}

/// A validated sale definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaleSpec {
    /// Units for sale.
    pub total: u32,
    /// Shards the stock is split over (each with its own lock).
    pub shards: u32,
    /// Most units one user may buy in this sale.
    pub per_user_limit: u32,
    /// Most units in one order.
    pub max_per_order: u32,
    /// How stock is protected.
    pub strategy: StrategyKind,
    /// How long a buyer has to pay a reserved order before it expires and its units come back;
    /// `None` for the lab's strategies, whose orders are final when bought.
    pub payment_window: Option<Duration>,
}

/// A sale as stored: its definition and the generation it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sale {
    /// Its SKU.
    pub sku: Sku,
    /// Its definition.
    pub spec: SaleSpec,
    /// Changes with every create/reset; every owner's batch write checks it.
    pub generation: i64,
}

/// Upper bounds that keep a sale within what one PostgreSQL row per shard handles well.
const MAX_TOTAL: i64 = 100_000_000;
const MAX_SHARDS: i64 = 1024;

/// An owned sale's payment window unless its definition names one.
pub const DEFAULT_PAYMENT_WINDOW: Duration = Duration::from_secs(600);
/// The longest payment window a sale may have (a day, in milliseconds).
const MAX_PAYMENT_WINDOW_MS: i64 = 86_400_000;

impl SaleSpec {
    /// Validates a request body.
    pub fn parse(body: SaleSpecBody) -> Result<Self, String> {
        let within = |name: &str, v: i64, lo: i64, hi: i64| -> Result<u32, String> {
            if (lo..=hi).contains(&v) { Ok(v as u32) } else { Err(format!("{name} must be between {lo} and {hi}")) }
        };
        let strategy: StrategyKind = body.strategy.as_deref().unwrap_or("owned-shards").parse()?;
        // Only an owner can take units back (see `migrations/0013_order_lifecycle.sql`).
        let payment_window = match (strategy.owned_fencing(), body.payment_window_ms) {
            (Some(_), None) => Some(DEFAULT_PAYMENT_WINDOW),
            (Some(_), Some(ms)) => Some(Duration::from_millis(u64::from(within("payment_window_ms", ms, 1, MAX_PAYMENT_WINDOW_MS)?))),
            (None, None) => None,
            (None, Some(_)) => return Err(format!("payment_window_ms needs an owned strategy; {strategy} sells final orders")),
        };
        let spec = Self {
            total: within("total", body.total, 0, MAX_TOTAL)?,
            shards: within("shards", body.shards, 1, MAX_SHARDS)?,
            per_user_limit: within("per_user_limit", body.per_user_limit, 1, MAX_TOTAL)?,
            max_per_order: within("max_per_order", body.max_per_order, 1, 1000)?,
            strategy,
            payment_window,
        };
        Ok(spec)
    }

    /// Initial stock of each shard: the total split evenly, the remainder spread over the first.
    pub fn shard_stock(&self) -> Vec<u32> {
        let (base, extra) = (self.total / self.shards, self.total % self.shards);
        (0..self.shards).map(|i| base + u32::from(i < extra)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(total: i64, shards: i64) -> SaleSpecBody {
        SaleSpecBody { total, shards, per_user_limit: 2, max_per_order: 2, strategy: None, payment_window_ms: None }
    }

    #[test]
    fn stock_is_split_evenly_with_the_remainder_spread() {
        let spec = SaleSpec::parse(body(10_003, 20)).unwrap();
        let stock = spec.shard_stock();
        assert_eq!(stock.iter().sum::<u32>(), 10_003);
        assert_eq!(&stock[..4], &[501, 501, 501, 500]);
        assert_eq!(spec.strategy, StrategyKind::OwnedShards);
    }

    #[test]
    fn out_of_range_values_are_refused() {
        assert!(SaleSpec::parse(body(-1, 20)).is_err());
        assert!(SaleSpec::parse(body(10, 0)).is_err());
        assert!(SaleSpec::parse(body(10, 5000)).is_err());
    }

    #[test]
    fn only_owned_sales_have_a_payment_window() {
        assert_eq!(SaleSpec::parse(body(10, 2)).unwrap().payment_window, Some(DEFAULT_PAYMENT_WINDOW));
        let lab = SaleSpecBody { strategy: Some("db-atomic".into()), ..body(10, 2) };
        assert_eq!(SaleSpec::parse(lab).unwrap().payment_window, None);
        let lab_with_window = SaleSpecBody { strategy: Some("db-atomic".into()), payment_window_ms: Some(1000), ..body(10, 2) };
        assert!(SaleSpec::parse(lab_with_window).is_err());
        assert!(SaleSpec::parse(SaleSpecBody { payment_window_ms: Some(0), ..body(10, 2) }).is_err());
    }
}
