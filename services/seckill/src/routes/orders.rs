//! `POST /v1/sales/{sku}/orders`.

use std::time::Instant;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;

use crate::{
    domain::{OrderBody, OrderRequest, OrderState, Sku},
    error::ApiError,
    inventory::Inventory,
    lifecycle::Lifecycle,
    store::OrderRecord,
    traffic::Traffic,
};

/// A purchase as answered: the order, its state when bought, and the secret its buyer pays or
/// cancels it with.
#[derive(Serialize)]
struct PurchaseAnswer {
    #[serde(flatten)]
    record: OrderRecord,
    state: OrderState,
    secret: String,
}

/// Places an order; `201` new, `200` replay of an `Idempotency-Key`.
pub(super) async fn create_order(
    req: HttpRequest,
    inventory: web::Data<Inventory>,
    lifecycle: web::Data<Lifecycle>,
    traffic: web::Data<Traffic>,
    sku: web::Path<Sku>,
    body: web::Json<OrderBody>,
) -> Result<HttpResponse, ApiError> {
    let started = Instant::now();
    let sku = sku.into_inner();
    let result = place(&req, &inventory, &lifecycle, &sku, body.into_inner()).await;
    let outcome = match &result {
        Ok(response) if response.status().as_u16() == 200 => "replayed",
        Ok(_) => "accepted",
        Err(e) => e.code(),
    };
    metrics::counter!("seckill_orders_total", "outcome" => outcome).increment(1);
    metrics::histogram!("seckill_order_duration_seconds", "outcome" => outcome).record(started.elapsed().as_secs_f64());
    // Only answers about an existing sale: unknown SKUs must not fill the window.
    if !matches!(outcome, "unknown_sale" | "invalid_request") {
        traffic.record(&sku, outcome, started.elapsed());
    }
    result
}

async fn place(
    req: &HttpRequest,
    inventory: &Inventory,
    lifecycle: &Lifecycle,
    sku: &Sku,
    body: OrderBody,
) -> Result<HttpResponse, ApiError> {
    let key = match req.headers().get("Idempotency-Key") {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| ApiError::InvalidRequest("Idempotency-Key must be ASCII".into()))?),
    };
    let view = inventory.sale(sku).await?;
    let request = OrderRequest::parse(body, key, view.sale.spec.max_per_order).map_err(ApiError::InvalidRequest)?;
    let purchase = inventory.buy(&view, &request).await?;
    let mut response = if purchase.replayed { HttpResponse::Ok() } else { HttpResponse::Created() };
    let state = if view.sale.spec.payment_window.is_some() { OrderState::Reserved } else { OrderState::Paid };
    let secret = lifecycle.secret(purchase.record.order_id);
    Ok(response.json(PurchaseAnswer { record: purchase.record, state, secret }))
}
