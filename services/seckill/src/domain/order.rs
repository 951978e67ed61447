use serde::Deserialize;

use super::UserId;

/// The body of `POST /v1/sales/{sku}/orders` as sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderBody {
    user_id: String,
    quantity: i64,
}

/// Units in one order: at least 1, at most the sale's `max_per_order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(u32);

impl Quantity {
    /// The number of units.
    pub fn get(self) -> u32 {
        self.0
    }
}

/// A validated order request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRequest {
    /// Who buys.
    pub user_id: UserId,
    /// How many units.
    pub quantity: Quantity,
    /// Client-chosen key making retries safe (`Idempotency-Key` header), 1-128 printable bytes.
    pub idempotency_key: Option<String>,
}

impl OrderRequest {
    /// Validates the body and the optional idempotency key against the sale's `max_per_order`.
    pub fn parse(body: OrderBody, idempotency_key: Option<&str>, max_per_order: u32) -> Result<Self, String> {
        let user_id = UserId::parse(&body.user_id)?;
        if body.quantity < 1 || body.quantity > i64::from(max_per_order) {
            return Err(format!("quantity must be between 1 and {max_per_order}"));
        }
        let idempotency_key = match idempotency_key {
            None => None,
            Some(k) if (1..=128).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_graphic()) => Some(k.to_owned()),
            Some(_) => return Err("Idempotency-Key must be 1-128 printable ASCII characters".into()),
        };
        Ok(Self { user_id, quantity: Quantity(body.quantity as u32), idempotency_key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(user: &str, quantity: i64) -> OrderBody {
        OrderBody { user_id: user.into(), quantity }
    }

    #[test]
    fn quantity_is_bounded_by_the_sale() {
        assert!(OrderRequest::parse(body("u", 2), None, 2).is_ok());
        assert!(OrderRequest::parse(body("u", 0), None, 2).is_err());
        assert!(OrderRequest::parse(body("u", 3), None, 2).is_err());
    }

    #[test]
    fn idempotency_keys_are_bounded_and_printable() {
        assert!(OrderRequest::parse(body("u", 1), Some("k-1"), 2).unwrap().idempotency_key.is_some());
        assert!(OrderRequest::parse(body("u", 1), Some(""), 2).is_err());
        assert!(OrderRequest::parse(body("u", 1), Some("a b"), 2).is_err());
    }
}
