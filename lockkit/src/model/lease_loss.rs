//! [`LeaseLoss`]: why a lease was lost.

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseLoss {
    /// Redis says the lock is no longer ours: the key was deleted, expired or now holds another
    /// owner's token.
    Gone,
    /// The local deadline passed without a confirmed renewal (Redis unreachable or slow, the lease
    /// was given explicitly and ran out, or this process was paused). The key may even still exist,
    /// but we can no longer prove we own it.
    Expired,
}

impl LeaseLoss {
    /// The cause in one word, for messages.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Gone => "gone",
            Self::Expired => "expired",
        }
    }
}
