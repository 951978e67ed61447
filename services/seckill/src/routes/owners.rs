//! `GET /v1/sales/{sku}/owners`: the shards of a sale this instance owns right now (owned
//! strategies), from memory: shard, fence, committed and available stock.

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::{domain::Sku, error::ApiError, inventory::Inventory};

pub(super) async fn owners(inventory: web::Data<Inventory>, sku: web::Path<Sku>) -> Result<HttpResponse, ApiError> {
    let sku = sku.into_inner();
    let owned = inventory.owned();
    Ok(HttpResponse::Ok().json(json!({"instance": owned.instance(), "shards": owned.ownership(&sku)})))
}
