use std::fmt;

/// A buyer's identifier: 1 to 64 bytes of printable characters, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserId(String);

impl UserId {
    /// Validates a raw user id.
    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.is_empty() || raw.len() > 64 {
            return Err("user_id must be 1-64 bytes".into());
        }
        if raw.chars().any(|c| c.is_control() || c.is_whitespace() && c != ' ') {
            return Err("user_id must be printable".into());
        }
        Ok(Self(raw.to_owned()))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::UserId;

    #[test]
    fn printable_ids_up_to_64_bytes_parse() {
        assert!(UserId::parse("user-42").is_ok());
        assert!(UserId::parse("Zoë 7").is_ok());
        for bad in ["", "tab\there", "nul\0", "line\nbreak", &"x".repeat(65)] {
            assert!(UserId::parse(bad).is_err(), "{bad:?}");
        }
    }
}
