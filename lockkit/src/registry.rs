//! [`Registry`]: the leases a client holds, which its watchdog renews, and when the sleeping
//! watchdog plans to look at them next.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use tokio::sync::Notify;

use crate::{clock::Moment, lease::Lease};

/// The leases a client holds.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    inner: Mutex<RegistryInner>,
    /// Wakes the watchdog when a lease needs attention before its planned wake-up.
    pub(crate) changed: Notify,
    next_id: AtomicU64,
}

#[derive(Debug, Default)]
struct RegistryInner {
    leases: HashMap<u64, Arc<Lease>>,
    /// When the sleeping watchdog will look next; `None` while it is scanning (then every change
    /// wakes it again). Lets a busy client add and remove leases without waking the watchdog each
    /// time: only a lease due before the planned wake-up does.
    planned: Option<Moment>,
}

impl Registry {
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Watches `lease`, whose first event (renewal or deadline) is at `next_event`.
    pub(crate) fn insert(&self, lease: Arc<Lease>, next_event: Moment) {
        let mut inner = self.inner.lock().unwrap();
        inner.leases.insert(lease.id, lease);
        self.wake_if_before_plan(&inner, next_event);
    }

    /// A watched lease's timetable moved (an extension, or a failed one); its next event is now
    /// `next_event`.
    pub(crate) fn rescheduled(&self, next_event: Moment) {
        self.wake_if_before_plan(&self.inner.lock().unwrap(), next_event);
    }

    fn wake_if_before_plan(&self, inner: &RegistryInner, next_event: Moment) {
        if inner.planned.is_none_or(|planned| next_event < planned) {
            self.changed.notify_one();
        }
    }

    /// Stops watching a lease. Never wakes the watchdog: it will find one lease fewer.
    pub(crate) fn remove(&self, id: u64) {
        self.inner.lock().unwrap().leases.remove(&id);
    }

    pub(crate) fn len(&self) -> usize {
        self.inner.lock().unwrap().leases.len()
    }

    /// The watched leases, for a scan; changes from now on wake the watchdog after the scan.
    pub(crate) fn start_scan(&self) -> Vec<Arc<Lease>> {
        let mut inner = self.inner.lock().unwrap();
        inner.planned = None;
        inner.leases.values().cloned().collect()
    }

    /// The watchdog sleeps until `wake_at` unless a change needs it earlier.
    pub(crate) fn plan(&self, wake_at: Moment) {
        self.inner.lock().unwrap().planned = Some(wake_at);
    }
}
