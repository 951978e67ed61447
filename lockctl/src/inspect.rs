//! `lockctl inspect`: one JSON line per lock, as the server sees it.

use std::time::Duration;

use lockkit::{Fence, HolderRole, LockInfo, LockKind};
use serde_json::json;

/// Whole milliseconds of a time left.
fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// One lock's JSON line: `name, held, ttl_ms, fence` as always, then `kind`, `holders` (`role`,
/// `id`: a short hash of the token, `ttl_ms`), `owner`, `permits_out` and `permits` (the limit),
/// `queue` (`id`, `deadline_ms`, head first), `writer_waiting_ms` and `delay_ms`.
pub(crate) fn inspect_line(lock: &LockInfo) -> serde_json::Value {
    let holders: Vec<_> =
        lock.holders.iter().map(|h| json!({"role": h.role.as_str(), "id": h.id, "ttl_ms": h.ttl.map(ms)})).collect();
    let queue: Vec<_> = lock.queue.iter().map(|w| json!({"id": w.id, "deadline_ms": ms(w.deadline)})).collect();
    let permits_out = (lock.kind == LockKind::Semaphore)
        .then(|| lock.holders.iter().filter(|h| h.role == HolderRole::Permit).count());
    json!({
        "name": lock.name,
        "held": lock.held,
        "ttl_ms": lock.ttl.map(ms),
        "fence": lock.fence.map(Fence::get),
        "kind": lock.kind.as_str(),
        "holders": holders,
        "owner": lock.owner,
        "permits_out": permits_out,
        "permits": lock.permits,
        "queue": queue,
        "writer_waiting_ms": lock.writer_waiting.map(ms),
        "delay_ms": lock.delay.map(ms),
    })
}
