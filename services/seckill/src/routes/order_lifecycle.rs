//! `GET /v1/orders/{id}`, `POST /v1/orders/{id}/pay`, `POST /v1/orders/{id}/cancel`: the buyer's
//! side of the order lifecycle. Each needs the headers `X-User-Id` (the buyer) and
//! `X-Order-Secret` (answered with the purchase); a wrong one of the three answers `404
//! unknown_order`, like an order that does not exist.

use actix_web::{HttpRequest, HttpResponse, web};

use crate::{
    domain::UserId,
    error::ApiError,
    lifecycle::{Lifecycle, OrderProof},
};

/// The order's state and, while reserved, its payment deadline.
pub(super) async fn get_order(req: HttpRequest, lifecycle: web::Data<Lifecycle>, id: web::Path<i64>) -> Result<HttpResponse, ApiError> {
    let proof = proof(&req, id.into_inner())?;
    Ok(HttpResponse::Ok().json(lifecycle.status(&proof).await?))
}

/// Pays a reserved order; `409 order_closed` once it was cancelled or expired.
pub(super) async fn pay(req: HttpRequest, lifecycle: web::Data<Lifecycle>, id: web::Path<i64>) -> Result<HttpResponse, ApiError> {
    let proof = proof(&req, id.into_inner())?;
    Ok(HttpResponse::Ok().json(lifecycle.pay(&proof).await?))
}

/// Cancels a reserved order, returning its units; `409 order_closed` once it was paid or expired.
pub(super) async fn cancel(req: HttpRequest, lifecycle: web::Data<Lifecycle>, id: web::Path<i64>) -> Result<HttpResponse, ApiError> {
    let proof = proof(&req, id.into_inner())?;
    Ok(HttpResponse::Ok().json(lifecycle.cancel(&proof).await?))
}

fn proof(req: &HttpRequest, order: i64) -> Result<OrderProof, ApiError> {
    let header = |name: &str| -> Result<String, ApiError> {
        let value = req.headers().get(name).ok_or_else(|| ApiError::InvalidRequest(format!("{name} header is required")))?;
        value.to_str().map(str::to_owned).map_err(|_| ApiError::InvalidRequest(format!("{name} must be ASCII")))
    };
    let user = UserId::parse(&header("X-User-Id")?).map_err(ApiError::InvalidRequest)?;
    Ok(OrderProof { order, user, secret: header("X-Order-Secret")? })
}
