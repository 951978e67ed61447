//! Liveness and readiness.

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::inventory::Inventory;

/// The process is up.
pub(super) async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Redis and PostgreSQL both answer: the instance can take orders.
pub(super) async fn readyz(inventory: web::Data<Inventory>) -> HttpResponse {
    let (db, redis) = tokio::join!(inventory.db().ping(), inventory.hints().ping());
    let body = json!({"postgres": if db { "ok" } else { "down" }, "redis": if redis { "ok" } else { "down" }});
    if db && redis {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().insert_header(("Retry-After", "1")).json(body)
    }
}
