//! HTTP handlers: parse and check the request, call the state, shape the answer.

pub mod admin;
pub mod buyer;

use std::sync::Arc;
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, error::JsonPayloadError, error::PathError, web};
use domain::{ProductId, TokenSigner};
use order_store::Db;
use stock_cache::StockCache;

use crate::error::ApiError;
use crate::purchase::PurchaseDesk;
use crate::rate_limit::RateLimits;
use crate::sold_out::SoldOutFlags;

/// Everything the handlers share; one per process.
pub struct AppState {
    pub cache: StockCache,
    pub db: Db,
    pub desk: PurchaseDesk,
    pub signer: TokenSigner,
    pub limits: RateLimits,
    pub sold_out: Arc<SoldOutFlags>,
    pub token_ttl: Duration,
}

/// `{product_id}` as a u64, or 400.
pub fn product_id(raw: &str) -> Result<ProductId, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::BadRequest(format!("product id `{raw}` is not a u64")))
}

/// Registers every route, with the extractor errors mapped to the API's error shape.
pub fn configure(cfg: &mut web::ServiceConfig, max_body_bytes: usize) {
    cfg.app_data(
        web::JsonConfig::default()
            .limit(max_body_bytes)
            .error_handler(json_error),
    )
    .app_data(web::PathConfig::default().error_handler(path_error))
    .app_data(web::PayloadConfig::new(max_body_bytes))
    .service(
        web::scope("/api/v1")
            .route(
                "/products/{product_id}/tokens",
                web::post().to(buyer::issue_token),
            )
            .route(
                "/products/{product_id}/purchase",
                web::post().to(buyer::purchase),
            )
            .route("/orders/{order_token}", web::get().to(buyer::order_status)),
    )
    .service(
        web::scope("/admin/v1")
            .route("/products/{product_id}", web::put().to(admin::put_product))
            .route("/products/{product_id}", web::get().to(admin::get_product)),
    );
}

fn json_error(error: JsonPayloadError, _: &HttpRequest) -> actix_web::Error {
    match error {
        JsonPayloadError::OverflowKnownLength { limit, .. }
        | JsonPayloadError::Overflow { limit } => {
            ApiError::PayloadTooLarge(format!("the body is larger than {limit} bytes")).into()
        }
        JsonPayloadError::ContentType => {
            ApiError::BadRequest("the body must be application/json".into()).into()
        }
        other => ApiError::BadRequest(format!("malformed JSON body: {other}")).into(),
    }
}

fn path_error(error: PathError, _: &HttpRequest) -> actix_web::Error {
    ApiError::BadRequest(format!("bad path: {error}")).into()
}

/// Answers every unknown route with the API's 404.
pub async fn not_found() -> HttpResponse {
    use actix_web::ResponseError;
    ApiError::NotFound("route").error_response()
}
