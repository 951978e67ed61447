//! Requests of `redis-gate-durable` waiting for their order to reach PostgreSQL, keyed by sale
//! and reference. The local writer fires a waiter after its batch committed; a waiter whose
//! entry another instance's writer took finds the order by polling PostgreSQL instead.
//!
//! A reference names one order: every seed starts the counter above all earlier references (the
//! gate epoch). A waiter is fired only by an entry of its own buyer as well, so that a wrong
//! answer would need both guards to fail.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use tokio::sync::oneshot;

use crate::{domain::Sku, store::GateWritten};

/// One waiting request: its buyer and where to send the outcome.
type Waiting = (String, oneshot::Sender<GateWritten>);

/// The waiting requests of this instance.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    /// One sender per waiting request; removed when fired or when the request gives up, so the
    /// map holds at most the requests in flight.
    waiting: Mutex<HashMap<(Sku, i64), Waiting>>,
}

/// A registered wait; dropping it unregisters.
pub(crate) struct Wait {
    waiters: Arc<Waiters>,
    key: (Sku, i64),
    /// Fired with the entry's outcome by the local writer.
    pub(crate) written: oneshot::Receiver<GateWritten>,
}

impl Waiters {
    /// Registers a wait of `user`'s order `gate_ref` (before the entry is enqueued, so no
    /// outcome is missed).
    pub(crate) fn register(self: &Arc<Self>, sku: &Sku, gate_ref: i64, user: &str) -> Wait {
        let (tx, rx) = oneshot::channel();
        let key = (sku.clone(), gate_ref);
        self.waiting.lock().unwrap().insert(key.clone(), (user.to_owned(), tx));
        Wait { waiters: self.clone(), key, written: rx }
    }

    /// Tells the request waiting for `user`'s order `gate_ref`, if any, what became of it. An
    /// entry of another buyer under the same reference (one handed out again) fires nothing.
    pub(crate) fn fire(&self, sku: &Sku, gate_ref: i64, user: &str, outcome: GateWritten) {
        let mut waiting = self.waiting.lock().unwrap();
        let key = (sku.clone(), gate_ref);
        if waiting.get(&key).is_some_and(|(waiter, _)| waiter == user)
            && let Some((_, tx)) = waiting.remove(&key)
        {
            let _ = tx.send(outcome);
        }
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        self.waiters.waiting.lock().unwrap().remove(&self.key);
    }
}
