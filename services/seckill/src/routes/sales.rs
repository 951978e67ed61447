//! `PUT /v1/sales/{sku}` (admin), `GET /v1/sales/{sku}` and `GET /v1/sales`.

use actix_web::{HttpResponse, web};
use serde_json::json;

use super::admin::Admin;
use crate::{
    domain::{Refusal, SaleSpec, SaleSpecBody, Sku},
    error::ApiError,
    inventory::Inventory,
};

/// Creates or resets a sale.
pub(super) async fn put_sale(
    _: Admin,
    inventory: web::Data<Inventory>,
    sku: web::Path<Sku>,
    body: web::Json<SaleSpecBody>,
) -> Result<HttpResponse, ApiError> {
    let sku = sku.into_inner();
    let spec = SaleSpec::parse(body.into_inner()).map_err(ApiError::InvalidRequest)?;
    let sale = inventory.put_sale(&sku, &spec).await?;
    Ok(HttpResponse::Ok().json(json!({
        "sku": sale.sku.as_str(),
        "total": spec.total,
        "shards": spec.shards,
        "per_user_limit": spec.per_user_limit,
        "max_per_order": spec.max_per_order,
        "strategy": spec.strategy.as_str(),
    })))
}

/// The sale's stock, overall and per shard, and its units reserved, paid and returned, from the
/// shard rows and the sale's counters: a public route must not be a way to run the audit's
/// aggregate over every order (that is `/audit`, admin or gated).
pub(super) async fn get_sale(inventory: web::Data<Inventory>, sku: web::Path<Sku>) -> Result<HttpResponse, ApiError> {
    let sku = sku.into_inner();
    let sale = inventory.db().live_sale(&sku).await?.ok_or_else(|| Refusal::UnknownSale(sku.to_string()))?;
    Ok(HttpResponse::Ok().json(json!({
        "sku": sale.sku,
        "total": sale.total,
        "sold": sale.sold,
        "remaining": sale.remaining,
        "reserved": sale.reserved,
        "paid": sale.paid,
        "returned": sale.returned,
        "strategy": sale.strategy,
        "shards": sale.shards,
    })))
}

/// Sales listed by the page: the most recent ones, newest first.
const LISTED: i64 = 50;

/// The most recent sales.
pub(super) async fn list_sales(inventory: web::Data<Inventory>) -> Result<HttpResponse, ApiError> {
    let sales = inventory.db().list_sales(LISTED).await?;
    Ok(HttpResponse::Ok().json(json!({ "sales": sales })))
}
