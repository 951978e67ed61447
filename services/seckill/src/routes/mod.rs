//! HTTP routes. Handlers parse input into domain values, call the inventory, and map results;
//! all status codes come from [`ApiError`].

mod admin;
mod audit;
mod health;
mod live;
mod metrics;
mod openapi;
mod order_lifecycle;
mod orders;
mod owners;
mod page;
mod reconcile;
mod sales;

use actix_web::{
    HttpRequest, HttpResponse,
    error::{JsonPayloadError, PathError},
    web,
};

pub use admin::AdminToken;
pub use audit::AuditGate;

use crate::error::ApiError;

/// Largest accepted request body.
pub const MAX_BODY: usize = 4096;

/// Registers every route and the JSON/path error handling.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.app_data(web::JsonConfig::default().limit(MAX_BODY).error_handler(json_error))
        .app_data(web::PayloadConfig::default().limit(MAX_BODY))
        .app_data(web::PathConfig::default().error_handler(|e: PathError, _| ApiError::InvalidRequest(e.to_string()).into()))
        .app_data(web::QueryConfig::default().error_handler(|e, _| ApiError::InvalidRequest(e.to_string()).into()))
        // The hot path first: the router tries routes in this order, and each `{sku}` pattern is
        // a regex match. (The request metrics read the pattern of the route taken, after routing,
        // and match nothing again.)
        .route("/v1/sales/{sku}/orders", web::post().to(orders::create_order))
        .route("/", web::get().to(page::page))
        .route("/healthz", web::get().to(health::healthz))
        .route("/readyz", web::get().to(health::readyz))
        .route("/metrics", web::get().to(metrics::metrics))
        .route("/openapi.json", web::get().to(openapi::openapi))
        .route("/v1/sales", web::get().to(sales::list_sales))
        .route("/v1/sales/{sku}", web::put().to(sales::put_sale))
        .route("/v1/sales/{sku}", web::get().to(sales::get_sale))
        .route("/v1/sales/{sku}/audit", web::get().to(audit::audit))
        .route("/v1/sales/{sku}/owners", web::get().to(owners::owners))
        .route("/v1/sales/{sku}/live", web::get().to(live::live))
        .route("/v1/sales/{sku}/reconcile", web::post().to(reconcile::reconcile))
        .route("/v1/orders/{id}", web::get().to(order_lifecycle::get_order))
        .route("/v1/orders/{id}/pay", web::post().to(order_lifecycle::pay))
        .route("/v1/orders/{id}/cancel", web::post().to(order_lifecycle::cancel))
        .default_service(web::to(not_found));
}

fn json_error(err: JsonPayloadError, _: &HttpRequest) -> actix_web::Error {
    match err {
        JsonPayloadError::Overflow { .. } | JsonPayloadError::OverflowKnownLength { .. } => ApiError::PayloadTooLarge(MAX_BODY),
        JsonPayloadError::ContentType => ApiError::UnsupportedMediaType,
        other => ApiError::InvalidRequest(format!("invalid JSON body: {other}")),
    }
    .into()
}

async fn not_found(req: HttpRequest) -> HttpResponse {
    actix_web::ResponseError::error_response(&ApiError::NotFound(format!("{} {}", req.method(), req.path())))
}
