//! [`OrderState`]: where an order is in its lifecycle, and [`ReturnPath`], how a returned unit
//! reaches the stock.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// Where an order is in its lifecycle. `reserved` → `paid`, or `reserved` → `cancelled` /
/// `expired`; every other state is final. Orders of the lab's strategies are `paid` when bought.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderState {
    /// Bought, its units held for the buyer until the payment window closes.
    Reserved,
    /// Paid: final.
    Paid,
    /// Cancelled by its buyer while reserved; its units went back to the stock.
    Cancelled,
    /// Not paid within the window; its units went back to the stock.
    Expired,
}

impl OrderState {
    /// The name stored and answered.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reserved => "reserved",
            Self::Paid => "paid",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
        }
    }
}

impl FromStr for OrderState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [Self::Reserved, Self::Paid, Self::Cancelled, Self::Expired]
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("unknown order state {s:?}"))
    }
}

impl fmt::Display for OrderState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an ended order's units reach the stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReturnPath {
    /// As a pending return, folded in by the shard's owner under its fence. The product.
    #[default]
    ThroughOwner,
    /// Added to the shard's row at once (`remaining = remaining + q`), outside the owner: the
    /// control, whose units the owner's next absolute write loses.
    Direct,
}
