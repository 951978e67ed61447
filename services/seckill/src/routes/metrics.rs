//! Prometheus text exposition of `seckill_*` and `lockkit_*` metrics.

use actix_web::HttpResponse;

pub(super) async fn metrics() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(crate::telemetry::prometheus().render())
}
