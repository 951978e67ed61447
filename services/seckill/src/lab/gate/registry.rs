//! Which sales have a running writer on this instance, and when one may stop.
//!
//! A writer stops when its sale no longer needs it: the stream is empty and the sale is sold
//! out, left the gate (reset to another strategy: its keys were retired) or was deleted. It is
//! started again by the next order, seed or reconciliation of the sale. Stopping must not race
//! with an order that was enqueued just after the writer looked: every order calls
//! [`Registry::ensure`] after its script, which either finds the writer still registered and
//! raises its `wanted` count (so the writer's [`Registry::retire`] refuses, and it reads again),
//! or finds it gone and starts a new one. So an entry is never left with no writer on the
//! instance that enqueued it.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
};

use tokio::task::JoinHandle;

use crate::domain::Sku;

/// One sale's writer.
struct Slot {
    handle: JoinHandle<()>,
    /// Raised by every [`Registry::ensure`] that found the writer running: a writer that read
    /// this count before deciding to stop may stop only if it did not move.
    wanted: u64,
}

/// The writers of this instance.
#[derive(Default, Clone)]
pub(crate) struct Registry {
    slots: Arc<Mutex<HashMap<Sku, Slot>>>,
}

impl Registry {
    /// Starts `spawn()` as the writer of `sku` unless one runs; if one runs, tells it that it is
    /// wanted.
    pub(crate) fn ensure<F>(&self, sku: &Sku, spawn: impl FnOnce() -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut slots = self.slots.lock().unwrap();
        if let Some(slot) = slots.get_mut(sku).filter(|slot| !slot.handle.is_finished()) {
            slot.wanted += 1;
            return;
        }
        let fresh = slots.insert(sku.clone(), Slot { handle: tokio::spawn(spawn()), wanted: 0 }).is_none();
        if fresh {
            metrics::gauge!("seckill_gate_writers").increment(1.0);
        }
    }

    /// How often the writer of `sku` was wanted so far (read before looking whether it may stop).
    pub(crate) fn wanted(&self, sku: &Sku) -> u64 {
        self.slots.lock().unwrap().get(sku).map_or(0, |slot| slot.wanted)
    }

    /// Unregisters the writer of `sku` if nobody wanted it since it read `seen`; true if it must
    /// stop (also when it is no longer registered: shutdown took it).
    pub(crate) fn retire(&self, sku: &Sku, seen: u64) -> bool {
        let mut slots = self.slots.lock().unwrap();
        match slots.get(sku) {
            Some(slot) if slot.wanted != seen => false,
            Some(_) => {
                slots.remove(sku);
                metrics::gauge!("seckill_gate_writers").decrement(1.0);
                true
            }
            None => true,
        }
    }

    /// Running writers.
    pub(crate) fn len(&self) -> usize {
        self.slots.lock().unwrap().len()
    }

    /// Takes every writer's handle (shutdown), so they can be awaited.
    pub(crate) fn drain(&self) -> Vec<JoinHandle<()>> {
        let handles: Vec<JoinHandle<()>> = self.slots.lock().unwrap().drain().map(|(_, slot)| slot.handle).collect();
        metrics::gauge!("seckill_gate_writers").decrement(handles.len() as f64);
        handles
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_writer_wanted_after_it_looked_does_not_stop() {
        let registry = Registry::default();
        let sku = Sku::parse("registry-1").unwrap();
        registry.ensure(&sku, std::future::pending);
        let seen = registry.wanted(&sku);

        registry.ensure(&sku, || async { unreachable!("one writer runs already") });

        assert!(!registry.retire(&sku, seen), "an order enqueued after the writer looked keeps it");
        assert!(registry.retire(&sku, registry.wanted(&sku)));
        assert_eq!(registry.len(), 0);
    }
}
