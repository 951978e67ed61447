//! Redis key names of one lock. All keys of a lock share the hash tag `{prefix:name}`, so every
//! script touches a single cluster slot.

use super::error::{Error, ErrorKind, Result};

/// Longest accepted lock name, in bytes.
pub const MAX_NAME_LEN: usize = 256;

/// The keys and channel of one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// The user-visible name (without prefix).
    pub(crate) name: String,
    /// `{prefix:name}`: holds the owner token, exactly what redis-py, redsync or node-redlock would
    /// use for the same name, so they exclude each other with us.
    pub(crate) lock: String,
    /// `{prefix:name}:fence`: the fence counter, incremented by every grant (and on one Redis by a
    /// refused first attempt too: fences have gaps), never expiring.
    pub(crate) fence: String,
    /// `{prefix:name}:released`: pub/sub channel published on release, to wake waiters.
    pub(crate) released: String,
}

/// Suffixes of the keys that primitives add next to `{prefix:name}` (and `:fence`). Every one
/// shares the lock's hash tag.
pub(crate) mod suffix {
    /// Lock-delay: exists (with the holder's token) until `delay` after the holder's lease ends.
    pub(crate) const DELAY: &str = "delay";
    /// Reentrant lock: the owner's grants, token -> expiry (server ms).
    pub(crate) const GRANTS: &str = "grants";
    /// Read-write lock: the readers, token -> expiry (server ms).
    pub(crate) const READERS: &str = "readers";
    /// Read-write lock with writer preference: set while a writer waits.
    pub(crate) const WRITER_WAITING: &str = "writer-waiting";
    /// Semaphore: the permits, token -> expiry (server ms).
    pub(crate) const PERMITS: &str = "permits";
    /// Semaphore: the permit count the latest permit was granted under (for inspection). Never
    /// outlives the permits (same expiry at most, deleted with the last one), so it is not in
    /// [`IN_USE`].
    pub(crate) const LIMIT: &str = "limit";
    /// Fair lock: the waiters, ticket -> arrival (server µs).
    pub(crate) const QUEUE: &str = "queue";
    /// Fair lock: the waiters, ticket -> deadline (server ms).
    pub(crate) const QUEUE_DEADLINES: &str = "queue-deadlines";
    /// Fair lock: prefix of each waiter's wake-up channel (`...:wake:TICKET`).
    pub(crate) const WAKE: &str = "wake";
    /// Leader election: the leader's token and value (a hash), with the lock's expiry.
    pub(crate) const LEADER: &str = "leader";
    /// Set by every failed attempt that a plain lock's holder may have to wake (a waiter of the
    /// plain lock, the read-write lock or the reentrant lock), for a while longer than that waiter
    /// sleeps: the plain lock's release publishes its wake-up only while it exists. Not in
    /// [`IN_USE`]: a waiter alone, with the lock free, is about to take it.
    pub(crate) const WAITING: &str = "waiting";
    /// Every suffix whose key means "the name is in use" (for fence retirement and inspection).
    pub(crate) const IN_USE: [&str; 6] = [DELAY, GRANTS, READERS, PERMITS, QUEUE, QUEUE_DEADLINES];
}

impl LockKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Self> {
        validate_name(name)?;
        // Built at their exact length: every acquire makes these, and `format!` would grow each
        // string once or twice on the way.
        let lock = concat(&["{", prefix, ":", name, "}"]);
        let (fence, released) = (concat(&[&lock, ":fence"]), concat(&[&lock, ":released"]));
        Ok(Self { name: name.to_owned(), fence, released, lock })
    }

    /// `{prefix:name}:suffix`: a key of this lock with the same hash tag.
    pub(crate) fn key(&self, suffix: &str) -> String {
        concat(&[&self.lock, ":", suffix])
    }

    /// `{prefix:name}:wake:`: the prefix of every fair waiter's own wake-up channel (the ticket
    /// follows).
    pub(crate) fn fair_wake_prefix(&self) -> String {
        format!("{}:", self.key(suffix::WAKE))
    }

    /// Recovers a lock name from one of its keys (`{prefix:name}` or `{prefix:name}:suffix`).
    pub(crate) fn name_of<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
        let rest = key.strip_prefix('{')?.strip_prefix(prefix)?.strip_prefix(':')?;
        let end = rest.find('}')?;
        Some(&rest[..end])
    }
}

fn concat(parts: &[&str]) -> String {
    let mut joined = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    parts.iter().for_each(|p| joined.push_str(p));
    joined
}

fn validate_name(name: &str) -> Result<()> {
    let problem = if name.is_empty() {
        "is empty"
    } else if name.len() > MAX_NAME_LEN {
        "is longer than 256 bytes"
    } else if name.contains(['{', '}']) {
        "contains '{' or '}', which would break the key's hash tag"
    } else if name.chars().any(char::is_control) {
        "contains control characters"
    } else {
        return Ok(());
    };
    Err(Error::new(ErrorKind::InvalidName, format!("lock name {name:?} {problem}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = LockKeys::new("lockkit", "orders:7").unwrap();
        assert_eq!(k.lock, "{lockkit:orders:7}");
        assert_eq!(k.fence, "{lockkit:orders:7}:fence");
        assert_eq!(k.released, "{lockkit:orders:7}:released");
        assert_eq!(LockKeys::name_of("lockkit", &k.fence), Some("orders:7"));
        assert_eq!(LockKeys::name_of("other", &k.fence), None);
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in ["", "a{b", "a}b", "tab\there", &"x".repeat(257)] {
            let err = LockKeys::new("lockkit", bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}");
        }
    }
}
