//! Requests of `redis-gate-durable` waiting for their order to reach PostgreSQL, keyed by sale
//! and reference: the request that made the order and any replay of its idempotency key. A
//! writer fires the waiters of its batch's entries once the batch committed: the local writer
//! directly, another instance's through its notice (see the `notices` module).
//!
//! A reference names one order: every seed starts the counter above all earlier references (the
//! gate epoch). A waiter is fired only by an entry of its own buyer as well, so that a wrong
//! answer would need both guards to fail.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use tokio::sync::watch;

use crate::{domain::Sku, store::GateWritten};

/// The requests waiting for one order.
#[derive(Debug)]
struct Slot {
    /// The buyer; an entry of another buyer under the same reference fires nothing.
    user: String,
    /// The outcome, once known: a `watch`, so that every request waiting for the order (the
    /// original and its replays) and one that registers after the outcome all see it.
    outcome: watch::Sender<Option<GateWritten>>,
    /// Registered waits; the slot goes when the last one is dropped, so the map holds at most
    /// the requests in flight.
    waits: usize,
}

/// The waiting requests of this instance.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    waiting: Mutex<HashMap<(Sku, i64), Slot>>,
}

/// A registered wait; dropping it unregisters.
pub(crate) struct Wait {
    waiters: Arc<Waiters>,
    key: (Sku, i64),
    outcome: watch::Receiver<Option<GateWritten>>,
}

impl Waiters {
    /// Registers a wait for `user`'s order `gate_ref`.
    pub(crate) fn register(self: &Arc<Self>, sku: &Sku, gate_ref: i64, user: &str) -> Wait {
        let key = (sku.clone(), gate_ref);
        let mut waiting = self.waiting.lock().unwrap();
        let slot = waiting
            .entry(key.clone())
            .and_modify(|slot| {
                if slot.user != user {
                    // Not the same order: the newer buyer's wait replaces it (the other's waits
                    // then fall back on PostgreSQL).
                    *slot = Slot { user: user.to_owned(), outcome: watch::Sender::new(None), waits: 0 };
                }
            })
            .or_insert_with(|| Slot { user: user.to_owned(), outcome: watch::Sender::new(None), waits: 0 });
        slot.waits += 1;
        let outcome = slot.outcome.subscribe();
        Wait { waiters: self.clone(), key, outcome }
    }

    /// Tells the requests waiting for `user`'s order `gate_ref`, if any, what became of it. An
    /// entry of another buyer under the same reference (one handed out again) fires nothing.
    pub(crate) fn fire(&self, sku: &Sku, gate_ref: i64, user: &str, outcome: GateWritten) {
        let waiting = self.waiting.lock().unwrap();
        if let Some(slot) = waiting.get(&(sku.clone(), gate_ref)).filter(|slot| slot.user == user) {
            slot.outcome.send_replace(Some(outcome));
        }
    }
}

impl Wait {
    /// The order's outcome once a writer fired it; pending until then.
    pub(crate) async fn outcome(&mut self) -> GateWritten {
        loop {
            if let Some(outcome) = *self.outcome.borrow_and_update() {
                return outcome;
            }
            if self.outcome.changed().await.is_err() {
                // The slot was replaced (another buyer's order under this reference): no writer
                // will fire this wait; the caller's PostgreSQL check answers it.
                return std::future::pending().await;
            }
        }
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        let mut waiting = self.waiters.waiting.lock().unwrap();
        if let Some(slot) = waiting.get_mut(&self.key) {
            slot.waits = slot.waits.saturating_sub(1);
            if slot.waits == 0 {
                waiting.remove(&self.key);
            }
        }
    }
}
