use std::fmt;

/// A sale's identifier: 1 to 64 characters of `A-Z a-z 0-9 - _ .` (it becomes part of Redis keys,
/// so braces and spaces are excluded). Deserializing validates it, so a route takes
/// `web::Path<Sku>` and a malformed SKU is answered 400 before the handler runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct Sku(String);

impl Sku {
    /// Validates a raw SKU.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let ok = (1..=64).contains(&raw.len()) && raw.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if ok { Ok(Self(raw.to_owned())) } else { Err("sku must be 1-64 characters of A-Z a-z 0-9 - _ .".into()) }
    }

    /// The SKU text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Sku {
    type Error = String;

    fn try_from(raw: String) -> Result<Self, String> {
        Self::parse(&raw)
    }
}

impl fmt::Display for Sku {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Sku;

    #[test]
    fn only_key_safe_skus_parse() {
        assert!(Sku::parse("phone-2026.v1_a").is_ok());
        for bad in ["", "a b", "a{b}", &"x".repeat(65), "é"] {
            assert!(Sku::parse(bad).is_err(), "{bad:?}");
        }
    }
}
