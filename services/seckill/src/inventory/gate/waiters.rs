//! Requests of `redis-gate-durable` waiting for their order to reach PostgreSQL, keyed by sale
//! and reference. The local writer fires a waiter after its batch committed; a waiter whose
//! entry another instance's writer took finds the order by polling PostgreSQL instead.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use tokio::sync::oneshot;

use crate::{domain::Sku, store::GateWritten};

/// The waiting requests of this instance.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    /// One sender per waiting request; removed when fired or when the request gives up, so the
    /// map holds at most the requests in flight.
    waiting: Mutex<HashMap<(Sku, i64), oneshot::Sender<GateWritten>>>,
}

/// A registered wait; dropping it unregisters.
pub(crate) struct Wait {
    waiters: Arc<Waiters>,
    key: (Sku, i64),
    /// Fired with the entry's outcome by the local writer.
    pub(crate) written: oneshot::Receiver<GateWritten>,
}

impl Waiters {
    /// Registers a wait for `gate_ref` (before the entry is enqueued, so no outcome is missed).
    pub(crate) fn register(self: &Arc<Self>, sku: &Sku, gate_ref: i64) -> Wait {
        let (tx, rx) = oneshot::channel();
        let key = (sku.clone(), gate_ref);
        self.waiting.lock().unwrap().insert(key.clone(), tx);
        Wait { waiters: self.clone(), key, written: rx }
    }

    /// Tells the request waiting for `gate_ref`, if any, what became of its order.
    pub(crate) fn fire(&self, sku: &Sku, gate_ref: i64, outcome: GateWritten) {
        if let Some(tx) = self.waiting.lock().unwrap().remove(&(sku.clone(), gate_ref)) {
            let _ = tx.send(outcome);
        }
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        self.waiters.waiting.lock().unwrap().remove(&self.key);
    }
}
