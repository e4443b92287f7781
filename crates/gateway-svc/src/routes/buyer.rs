//! The buyer's way into a sale: a purchase token, the purchase.

use actix_web::dev::ServiceRequest;
use actix_web::{HttpResponse, web};
use chrono::{SecondsFormat, Utc};
use domain::{OrderToken, PurchaseClaims};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::identity::Buyer;
use crate::purchase::Order;
use crate::responses::{
    BadRequest, Conflict, Forbidden, NotFound, PayloadTooLarge, RateLimited, Unauthenticated,
    Unavailable,
};
use crate::routes::{AppState, ProductPath, product_id, whole_number};

/// A purchase token: present it, once, to buy this product.
#[derive(Serialize, ToSchema)]
pub struct TokenIssued {
    /// Opaque; bound to the buyer, the product and `expires_at`.
    token: String,
    /// When the token stops being accepted (RFC 3339, UTC, milliseconds).
    #[schema(format = DateTime)]
    expires_at: String,
    /// The key of the order this token can place, for `GET /api/v1/orders/{order_token}`:
    /// a buyer who lost the purchase's answer polls it instead of buying again.
    #[schema(pattern = r"^[0-9]+-[0-9a-f]{32}$")]
    order_token: String,
}

/// Issue a purchase token.
///
/// A one-time token, bound to the buyer, the product and an expiry (`tokens.ttl_secs`), that
/// the purchase must present. 403 is `SALE_NOT_OPEN` (before the window or after it); 404 an
/// unknown product; 503 a product MySQL knows but Redis has not loaded. Counts against the
/// instance's and the buyer's rate limits.
#[utoipa::path(
    post,
    path = "/api/v1/products/{product_id}/tokens",
    tag = "buyer",
    params(ProductPath),
    security(("buyer" = [])),
    responses(
        (status = 201, description = "A purchase token.", body = TokenIssued, links(
            ("Purchase" = (
                operation_id = "purchase",
                description = "Buy one unit with the token.",
                parameters(("product_id" = "$request.path.product_id")),
                request_body = json!({"token": "$response.body#/token", "quantity": 1}),
            )),
        )),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    )
)]
pub async fn issue_token(
    state: web::Data<AppState>,
    path: web::Path<String>,
    buyer: Buyer,
) -> Result<HttpResponse, ApiError> {
    state.limits.check_global()?;
    let product = product_id(&path)?;
    state.limits.check_user(buyer.0)?;

    // One read for both: whether the sale is open, and which sale the token is for.
    let read = state.cache.sale_window(product);
    let Some(window) = state.sale_windows.get(product, read).await? else {
        return Err(not_loaded_or_unknown(&state, product).await);
    };
    let now = Utc::now();
    let now_ms = now.timestamp_millis();
    if now_ms < window.starts_at_ms || (window.ends_at_ms > 0 && now_ms >= window.ends_at_ms) {
        return Err(ApiError::SaleNotOpen);
    }

    let expires_at = now + state.token_ttl;
    let claims = PurchaseClaims {
        order_token: OrderToken::random(product),
        user_id: buyer.0,
        expires_at_ms: expires_at.timestamp_millis(),
        sale: window.sale,
    };
    metrics::counter!("seckill_tokens_issued_total").increment(1);
    Ok(HttpResponse::Created().json(TokenIssued {
        token: state.signer.issue(&claims),
        expires_at: expires_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        order_token: claims.order_token.to_string(),
    }))
}

/// Redis has no meta for the product: 404 if MySQL does not know it either, else 503.
async fn not_loaded_or_unknown(state: &AppState, product: domain::ProductId) -> ApiError {
    match state.db.product(product).await {
        Ok(None) => ApiError::NotFound("product"),
        Ok(Some(_)) => ApiError::Unavailable {
            message: "the product is not loaded for sale",
            cause: None,
        },
        Err(error) => error.into(),
    }
}

/// A purchase: the token from `POST …/tokens` and how many units.
#[derive(Deserialize, ToSchema)]
pub struct PurchaseRequest {
    /// The purchase token, as issued to this buyer for this product.
    token: String,
    /// Units to buy: at least 1, at most the product's per-user limit.
    #[schema(format = "uint32", minimum = 1, maximum = 4_294_967_295_u32)]
    #[serde(deserialize_with = "whole_number")]
    quantity: u32,
}

/// The order is queued: it will be written, or the unit goes back on sale.
#[derive(Serialize, ToSchema)]
pub struct Queued {
    /// The order's key, for `GET /api/v1/orders/{order_token}`.
    #[schema(pattern = r"^[0-9]+-[0-9a-f]{32}$")]
    order_token: String,
    status: QueuedStatus,
}

/// A purchase answered 202 is always `queued`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum QueuedStatus {
    Queued,
}

/// Buy.
///
/// The Redis pre-deduct and, for a winner, the transactional order message; 202 means the
/// order is queued. 400 is a malformed body or a quantity above the per-user limit; 403
/// `INVALID_TOKEN` (forged, expired, another buyer's or product's) or `SALE_NOT_OPEN` (also
/// for a token of an earlier sale of the product, which a new sale has ended); 409
/// `DUPLICATE` (the token was used), `LIMIT_EXCEEDED` or `SOLD_OUT`; 503 Redis or the broker
/// unreachable, or the product not loaded. Counts against the instance's and the buyer's
/// rate limits.
#[utoipa::path(
    post,
    path = "/api/v1/products/{product_id}/purchase",
    tag = "buyer",
    params(ProductPath),
    request_body = PurchaseRequest,
    security(("buyer" = [])),
    responses(
        (status = 202, description = "Queued.", body = Queued, links(
            ("OrderStatus" = (
                operation_id = "order_status",
                description = "Where the order is.",
                parameters(("order_token" = "$response.body#/order_token")),
            )),
        )),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    )
)]
pub async fn purchase(
    state: web::Data<AppState>,
    path: web::Path<String>,
    buyer: Buyer,
    body: web::Json<PurchaseRequest>,
) -> Result<HttpResponse, ApiError> {
    state.limits.check_global()?;
    let product = product_id(&path)?;
    let order = Order {
        buyer: buyer.0,
        product,
        token: &body.token,
        quantity: body.quantity,
    };
    match ApiError::try_from(state.desk.purchase(order).await) {
        Ok(refused_or_unsettled) => Err(refused_or_unsettled),
        Err(order_token) => Ok(HttpResponse::Accepted().json(Queued::from(order_token))),
    }
}

impl From<OrderToken> for Queued {
    fn from(order_token: OrderToken) -> Self {
        Self {
            order_token: order_token.to_string(),
            status: QueuedStatus::Queued,
        }
    }
}

/// Which purchases need no `http_request` span while spans are not exported
/// (`platform::http::traced`): every one that brings no caller's `traceparent` to join.
/// Such a span would carry the method and the route, which the purchase's own span makes
/// plain, and a span is a real part of a request's cost on the path that stops at
/// pre_deduct. The `purchase` span is then the trace's root, and its ids are what the log
/// lines and the message's `traceparent` carry. A purchase of a product this gateway has
/// flagged sold out needs no span at all (see `purchase::record::purchase_span`): it is
/// refused from the flag, or earlier by a rate limit or a malformed body, and none of
/// those paths logs a line or sends a message.
pub fn quiet_purchase(request: &ServiceRequest) -> bool {
    !request.headers().contains_key("traceparent")
}
