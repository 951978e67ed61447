//! The primitives beyond the plain lock, each against real Redis with a control that shows the
//! check would catch the violation; `on_cluster` runs each on a 3-master Redis Cluster.

mod fair;
mod inspect;
mod lock_delay;
mod multi;
mod on_cluster;
mod read_write;
mod reentrant;
mod retire;
mod semaphore;

use std::sync::atomic::{AtomicU32, Ordering};

/// Counts who is inside a critical section, and the most that ever were at once.
#[derive(Default)]
pub(crate) struct Occupancy {
    inside: AtomicU32,
    most: AtomicU32,
}

impl Occupancy {
    pub(crate) fn enter(&self) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
    }

    pub(crate) fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    pub(crate) fn inside(&self) -> u32 {
        self.inside.load(Ordering::SeqCst)
    }

    pub(crate) fn most(&self) -> u32 {
        self.most.load(Ordering::SeqCst)
    }
}

/// Keys of the lock `name` (default prefix) other than its fence counter and a waiter mark that
/// will expire.
pub(crate) async fn leftover_keys(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Vec<String> {
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{{lockkit:{name}}}*")).query_async(conn).await.unwrap();
    let mut left = Vec::new();
    for key in keys {
        // The waiter mark outlives the last waiter's sleep on purpose, and expires by itself.
        let expiring_mark =
            key.ends_with(":waiting") && redis::cmd("PTTL").arg(&key).query_async::<i64>(&mut *conn).await.unwrap() > 0;
        if !key.ends_with(":fence") && !expiring_mark {
            left.push(key);
        }
    }
    left
}
