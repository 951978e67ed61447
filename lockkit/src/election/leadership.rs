//! [`Leadership`]: what a won campaign hands the leader: its term, its loss signal, resign.

use std::{future::Future, time::Duration};

use crate::{Fence, LeaseLoss, LockGuard, model::error::Result};

/// Proof of leading an election: a held lock whose value followers read. Carry its
/// [`term`](Self::term) into every write the leader makes, watch [`lost`](Self::lost), and end
/// with [`resign`](Self::resign). Dropping it resigns in the background, like dropping a guard.
#[must_use = "leadership ends as soon as it is dropped; keep it while you lead"]
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
    value: String,
}

impl Leadership {
    pub(crate) fn new(guard: LockGuard, value: String) -> Self {
        Self { guard, value }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The value this leader campaigned with.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The term: the fence of the leader's lock, larger than every earlier leader's. A store that
    /// refuses a term below the highest it has seen refuses a deposed leader's writes.
    pub fn term(&self) -> Fence {
        self.guard.fence()
    }

    /// Completes when leadership is lost, with the cause: the same signal as
    /// [`LockGuard::lost`], independent of this handle's lifetime.
    pub fn lost(&self) -> impl Future<Output = LeaseLoss> + Send + 'static {
        self.guard.lost()
    }

    /// Whether leadership has been lost (reads the local deadline, like
    /// [`LockGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// `Err` (with [`Error::is_lost`](crate::Error::is_lost)) once leadership was lost: a cheap
    /// check before a write.
    pub fn ensure_held(&self) -> Result<()> {
        self.guard.ensure_held()
    }

    /// How long the lease is known to last from now (see [`LockGuard::remaining`]).
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// Steps down: releases the lock (owner-checked) and its value, which wakes the next
    /// candidate. Returns whether this candidate still led: `false` means its lease had ended.
    /// Cancel-safe like [`LockGuard::release`].
    pub async fn resign(self) -> Result<bool> {
        self.guard.release().await
    }
}
