//! Which scripts keep each [`Hold`] on Redis: the attempt, the owner-checked extension and
//! release, and what a waiter that gives up must undo. The one place that maps the primitives'
//! data to their scripts; one Redis, a cluster and Redlock all run what it returns.

use std::time::Duration;

use super::{
    fair, leader, read_write, reentrant,
    scripts::{self, Call},
    semaphore,
};
use crate::model::{
    hold::{Hold, HoldKind},
    keys::{LockKeys, suffix},
};

/// The attempt to take `hold` for `token` with a lease of `lease`.
pub(crate) fn acquire<'a>(hold: &'a Hold, token: &'a str, lease: Duration) -> Call<'a> {
    let keys = &hold.keys;
    match &hold.kind {
        HoldKind::Lock { delay } => scripts::plain_acquire(keys, token, lease, *delay),
        HoldKind::Reentrant { owner } => reentrant::acquire(keys, token, lease, owner),
        HoldKind::Read => read_write::acquire_read(keys, token, lease),
        HoldKind::Write { prefer_writers } => read_write::acquire_write(keys, token, lease, *prefer_writers),
        HoldKind::Permit { permits } => semaphore::acquire(keys, token, lease, *permits),
        HoldKind::Fair { queue_timeout } => fair::acquire(keys, token, lease, &hold.ticket, *queue_timeout),
        HoldKind::Leader { value } => leader::acquire(keys, token, lease, value),
    }
}

/// The owner-checked extension of `token`'s grant to `lease` from now.
pub(crate) fn extend<'a>(hold: &'a Hold, token: &'a str, lease: Duration) -> Call<'a> {
    let keys = &hold.keys;
    match &hold.kind {
        HoldKind::Lock { delay } => scripts::plain_extend(keys, token, lease, *delay),
        HoldKind::Write { .. } | HoldKind::Fair { .. } => scripts::plain_extend(keys, token, lease, Duration::ZERO),
        HoldKind::Reentrant { .. } => reentrant::extend(keys, token, lease),
        HoldKind::Read => read_write::extend_read(keys, token, lease),
        HoldKind::Permit { .. } => semaphore::extend(keys, token, lease),
        HoldKind::Leader { .. } => leader::extend(keys, token, lease),
    }
}

/// The owner-checked release of `token`'s grant, which wakes waiters.
pub(crate) fn release<'a>(hold: &'a Hold, token: &'a str) -> Call<'a> {
    let keys = &hold.keys;
    match &hold.kind {
        HoldKind::Lock { delay } => scripts::plain_release(keys, token, *delay),
        HoldKind::Write { .. } => scripts::plain_release(keys, token, Duration::ZERO),
        HoldKind::Reentrant { .. } => reentrant::release(keys, token),
        HoldKind::Read => read_write::release_read(keys, token),
        HoldKind::Permit { .. } => semaphore::release(keys, token),
        HoldKind::Fair { .. } => fair::release(keys, token),
        HoldKind::Leader { .. } => leader::release(keys, token),
    }
}

/// Whether its release is an owner-checked delete of the lock key and nothing more (the plain
/// lock without a lock-delay, a read-write lock's write side): what a server's own
/// compare-and-delete command can do without a script.
pub(crate) fn releases_by_compare_and_delete(hold: &Hold) -> bool {
    matches!(hold.kind, HoldKind::Lock { delay } if delay.is_zero()) || matches!(hold.kind, HoldKind::Write { .. })
}

/// What a waiter that gives up (wait over, or its acquire dropped) must undo on the server: a
/// fair lock's queue place. `None` for the others, which leave nothing behind.
pub(crate) fn leave(hold: &Hold) -> Option<Call<'_>> {
    match &hold.kind {
        HoldKind::Fair { .. } => Some(fair::leave(&hold.keys, &hold.ticket)),
        _ => None,
    }
}

/// Keys a name's primitives may use besides the lock key and the fence counter.
pub(crate) fn side_keys(keys: &LockKeys) -> Vec<String> {
    suffix::IN_USE.iter().map(|s| keys.key(s)).collect()
}
