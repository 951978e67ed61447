//! The OpenAPI document of these routes (kept in sync by the `openapi` API test).

use actix_web::HttpResponse;

/// The spec, embedded at build time.
const SPEC: &str = include_str!("../../openapi.json");

pub(super) async fn openapi() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(SPEC)
}
