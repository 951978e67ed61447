//! `POST /v1/sales/{sku}/reconcile` (admin): repair a `redis-gate` sale's Redis keys from
//! PostgreSQL and report the difference (see `lab::gate::reconcile`).

use actix_web::{HttpResponse, web};
use serde::Deserialize;

use super::admin::Admin;
use crate::{
    domain::{Refusal, Sku},
    error::ApiError,
    inventory::Inventory,
};

/// `?drain=1`: wait (bounded) for the queue to empty instead of refusing.
#[derive(Debug, Deserialize)]
pub(super) struct ReconcileQuery {
    #[serde(default)]
    drain: Option<u8>,
}

/// Reconciles the sale; `409 queue_not_drained` while orders are queued or in flight.
pub(super) async fn reconcile(
    _: Admin,
    inventory: web::Data<Inventory>,
    sku: web::Path<Sku>,
    query: web::Query<ReconcileQuery>,
) -> Result<HttpResponse, ApiError> {
    let sku = sku.into_inner();
    let drain = match query.drain {
        None | Some(0) => false,
        Some(1) => true,
        Some(_) => return Err(ApiError::InvalidRequest("drain must be 0 or 1".into())),
    };
    let sale = inventory.db().sale(&sku).await?.ok_or_else(|| Refusal::UnknownSale(sku.to_string()))?;
    let report = inventory.gate().reconcile(&sale, drain).await?;
    Ok(HttpResponse::Ok().json(report))
}
