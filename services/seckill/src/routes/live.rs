//! `GET /v1/sales/{sku}/live`: the sale as it stands (shards with stock, fence and owner; units
//! reserved, paid and returned; fence rejections) from one PostgreSQL query, plus what this
//! instance answered over the last seconds. What the sale page and `make demo` poll.

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::{
    domain::{Refusal, Sku},
    error::ApiError,
    inventory::Inventory,
    traffic::Traffic,
};

pub(super) async fn live(
    inventory: web::Data<Inventory>,
    traffic: web::Data<Traffic>,
    sku: web::Path<Sku>,
) -> Result<HttpResponse, ApiError> {
    let sku = sku.into_inner();
    let sale = inventory.db().live_sale(&sku).await?.ok_or_else(|| Refusal::UnknownSale(sku.to_string()))?;
    Ok(HttpResponse::Ok().json(json!({
        "sale": sale,
        "instance": inventory.owned().instance(),
        "traffic": traffic.view(&sku),
    })))
}
