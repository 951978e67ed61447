//! `GET /`: the sale page, a single HTML file embedded in the binary (no CDN, no build step). It
//! lists the sales and shows one live, polling `GET /v1/sales/{sku}/live` once a second.

use actix_web::HttpResponse;

/// The page, embedded at build time.
const PAGE: &str = include_str!("../../static/index.html");

pub(super) async fn page() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((
            "Content-Security-Policy",
            "default-src 'self'; style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'",
        ))
        .body(PAGE)
}
