//! `GET /v1/sales/{sku}/audit`: the sale checked from PostgreSQL alone.
//!
//! The audit aggregates every order of the sale, so its cost is bounded instead of being left to
//! whoever calls it: one audit runs at a time per instance ([`AuditGate`]), at most
//! [`MAX_QUEUED`] more wait for their turn, and any beyond that get `503 busy` at once. It stays
//! open without a token, as the k6 scenarios, the bench and the chaos suite read it.

use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::{HttpResponse, web};
use tokio::sync::Semaphore;

use crate::{
    domain::{Refusal, Sku},
    error::ApiError,
    inventory::Inventory,
};

/// Audits that may wait for the running one.
pub(super) const MAX_QUEUED: usize = 4;

/// One audit at a time, and a short queue (app data).
#[derive(Debug)]
pub struct AuditGate {
    running: Semaphore,
    /// Requests in the gate: the running audit and those waiting for it.
    waiting: AtomicUsize,
}

impl Default for AuditGate {
    fn default() -> Self {
        Self { running: Semaphore::new(1), waiting: AtomicUsize::new(0) }
    }
}

pub(super) async fn audit(
    inventory: web::Data<Inventory>,
    gate: web::Data<AuditGate>,
    sku: web::Path<Sku>,
) -> Result<HttpResponse, ApiError> {
    let sku = sku.into_inner();
    let _in_line = InLine::join(&gate).ok_or(ApiError::Busy)?;
    let _turn = gate.running.acquire().await;
    let audit = inventory.db().audit(&sku).await?.ok_or_else(|| Refusal::UnknownSale(sku.to_string()))?;
    Ok(HttpResponse::Ok().json(audit))
}

/// A place in the gate (running or waiting), given back when dropped, also when the client
/// goes away mid-wait.
struct InLine<'a>(&'a AuditGate);

impl<'a> InLine<'a> {
    /// A place, unless the running audit and [`MAX_QUEUED`] waiting ones fill the gate.
    fn join(gate: &'a AuditGate) -> Option<Self> {
        let place = Self(gate);
        (gate.waiting.fetch_add(1, Ordering::AcqRel) <= MAX_QUEUED).then_some(place)
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_holds_the_running_audit_and_four_waiting() {
        let gate = AuditGate::default();
        let places: Vec<InLine<'_>> = (0..=MAX_QUEUED).map(|_| InLine::join(&gate).expect("room")).collect();

        assert!(InLine::join(&gate).is_none(), "a sixth is turned away");
        drop(places);
        assert!(InLine::join(&gate).is_some(), "places are given back on drop");
        assert_eq!(gate.waiting.load(Ordering::Acquire), 0);
    }
}
