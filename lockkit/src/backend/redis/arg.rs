//! [`Arg`]: one key or argument of a script call, which need not own its text.

use std::io::Write;

use crate::model::keys::LockKeys;

/// A key or argument of a [`Call`](super::scripts::Call), written into the command as it is.
///
/// The lock's own keys and the owner token are borrowed from the guard, and a side key
/// (`{prefix:name}:suffix`, what [`LockKeys::key`] returns) is written straight into the command's
/// buffer: a plain lock pair builds a release and the first attempt's `EXISTS` of the delay key,
/// and the copies and the formatted key they made were a measurable part of the client's CPU per
/// pair (about a fifth of its allocations).
#[derive(Debug, Clone)]
pub(crate) enum Arg<'a> {
    Owned(String),
    Borrowed(&'a str),
    /// `{prefix:name}:suffix`, with `{prefix:name}` borrowed.
    Side {
        lock: &'a str,
        suffix: &'static str,
    },
}

impl<'a> Arg<'a> {
    /// The side key `suffix` of `keys`.
    pub(crate) fn side(keys: &'a LockKeys, suffix: &'static str) -> Self {
        Self::Side { lock: &keys.lock, suffix }
    }

    /// Its length in bytes, to size a command's buffer once.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Owned(text) => text.len(),
            Self::Borrowed(text) => text.len(),
            Self::Side { lock, suffix } => lock.len() + 1 + suffix.len(),
        }
    }
}

impl From<String> for Arg<'_> {
    fn from(text: String) -> Self {
        Self::Owned(text)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(text: &'a str) -> Self {
        Self::Borrowed(text)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(text: &'a String) -> Self {
        Self::Borrowed(text)
    }
}

impl redis::ToRedisArgs for Arg<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        match self {
            Self::Owned(text) => out.write_arg(text.as_bytes()),
            Self::Borrowed(text) => out.write_arg(text.as_bytes()),
            Self::Side { lock, suffix } => {
                let mut arg = out.writer_for_next_arg();
                // Into a command's in-memory buffer: cannot fail. Three plain writes: `write!`
                // went through the formatting machinery for the same bytes.
                let _ = arg.write_all(lock.as_bytes());
                let _ = arg.write_all(b":");
                let _ = arg.write_all(suffix.as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::keys::suffix;

    #[test]
    fn a_side_key_is_written_as_key_returns_it() {
        let keys = LockKeys::new("lockkit", "orders:7").unwrap();
        let side = Arg::side(&keys, suffix::DELAY);
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(&side);
        let mut expected = redis::cmd("EXISTS");
        expected.arg(keys.key(suffix::DELAY));

        assert_eq!(cmd.get_packed_command(), expected.get_packed_command());
        assert_eq!(side.len(), keys.key(suffix::DELAY).len());
    }
}
