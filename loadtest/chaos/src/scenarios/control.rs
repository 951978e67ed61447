//! `control`: the [`pause`](super::pause) scenario against the `redis-lock` strategy, which
//! locks the shards but does not fence its writes. A paused holder's late write lands over its
//! successor's, so units are sold twice. Its `b` reaches PostgreSQL a few milliseconds away, so
//! that every pause lands inside some read-to-write window (see [`pause`](super::pause)). The
//! suite fails if the checker does *not* detect that: a chaos suite that cannot see the bug
//! fencing prevents proves nothing about fencing.
//!
//! After the faults the sale is drained to sold out, which turns the inconsistent shards into a
//! measurable oversell.

use super::pause::Pause;

/// The unfenced strategy under test.
const UNFENCED: &str = "redis-lock";

/// The control plan.
pub(crate) fn plan() -> Pause {
    Pause::control(UNFENCED)
}
