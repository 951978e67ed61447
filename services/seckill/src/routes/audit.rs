//! `GET /v1/sales/{sku}/audit`: the sale checked from PostgreSQL alone.

use actix_web::{HttpResponse, web};

use crate::{domain::Sku, error::ApiError, inventory::Inventory};

pub(super) async fn audit(inventory: web::Data<Inventory>, sku: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let sku = Sku::parse(&sku).map_err(ApiError::InvalidRequest)?;
    let audit = inventory.db().audit(&sku).await?.ok_or_else(|| ApiError::UnknownSale(sku.to_string()))?;
    Ok(HttpResponse::Ok().json(audit))
}
