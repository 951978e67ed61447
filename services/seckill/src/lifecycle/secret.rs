//! [`OrderSecrets`]: the order-scoped secret a buyer proves ownership of an order with. It is an
//! HMAC of the order id under a key the database generated (`service_keys`), so every instance
//! derives and checks it without storing it, and a replayed purchase answers the same secret.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Bytes of the HMAC a secret carries (128 bits).
const SECRET_BYTES: usize = 16;

/// Derives and checks order secrets.
#[derive(Clone)]
pub struct OrderSecrets {
    /// The HMAC keyed once (the key's inner and outer pads hashed), cloned for each order.
    keyed: Hmac<Sha256>,
}

impl std::fmt::Debug for OrderSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OrderSecrets(..)")
    }
}

impl OrderSecrets {
    /// Secrets under `key`.
    pub fn new(key: Vec<u8>) -> Self {
        Self { keyed: Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes a key of any length") }
    }

    fn mac(&self, order: i64) -> Hmac<Sha256> {
        let mut mac = self.keyed.clone();
        mac.update(&order.to_be_bytes());
        mac
    }

    /// The secret of `order`, as handed to its buyer (hex).
    pub fn secret(&self, order: i64) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut secret = String::with_capacity(2 * SECRET_BYTES);
        for byte in &self.mac(order).finalize().into_bytes()[..SECRET_BYTES] {
            secret.push(char::from(HEX[usize::from(byte >> 4)]));
            secret.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        secret
    }

    /// Whether `given` is the secret of `order` (compared in constant time).
    pub fn verify(&self, order: i64, given: &str) -> bool {
        let Some(bytes) = decode_hex(given).filter(|b| b.len() == SECRET_BYTES) else { return false };
        self.mac(order).verify_truncated_left(&bytes).is_ok()
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::OrderSecrets;

    #[test]
    fn a_secret_opens_its_own_order_only() {
        let secrets = OrderSecrets::new(b"key".to_vec());
        let secret = secrets.secret(7);
        assert_eq!(secret.len(), 32);
        assert!(secrets.verify(7, &secret));
        assert!(!secrets.verify(8, &secret));
        assert!(!OrderSecrets::new(b"other".to_vec()).verify(7, &secret));
        assert!(!secrets.verify(7, &secret[..30]));
        assert!(!secrets.verify(7, "zz"));
    }

    #[test]
    fn a_secret_is_the_hmac_sha256_of_the_order_id_truncated_to_128_bits_in_lowercase_hex() {
        // HMAC-SHA256(key = "key", message = 7 as 8 big-endian bytes), first 16 bytes, computed
        // with Python's hmac module: a change of encoding would strand every secret handed out.
        assert_eq!(OrderSecrets::new(b"key".to_vec()).secret(7), "646ef7f12549fc8eacd5a6b97d2843aa");
    }
}
