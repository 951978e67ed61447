//! What the backends answer the layers above with: one acquire attempt ([`Grant`]), and the
//! renewal of a batch of leases ([`Renewal`] in, [`Renewed`] out).

use std::time::Duration;

use super::{fence::Fence, hold::Hold};

/// What one acquire attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// The lock is ours, under this fence.
    Granted(Fence),
    /// Someone else holds it, with this much lease left (`None`: unknown or no expiry).
    Held(Option<Duration>),
    /// Nobody won (Redlock's split vote): every partial grant was undone; retry after a jittered
    /// pause rather than at once, so that contenders do not split again.
    Contested,
}

/// One lease to renew.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal<'a> {
    pub(crate) hold: &'a Hold,
    pub(crate) token: &'a str,
    pub(crate) lease: Duration,
}

/// What a renewal came to, per lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Extended by `lease` from when the request was sent.
    Extended,
    /// The lock is no longer ours (expired, deleted, taken over).
    Gone,
    /// No answer good enough to tell: retry until the deadline.
    Unanswered,
}
