//! The buyer's endpoints: a purchase token, the purchase, the order's status.

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
    let window = match state.cache.sale_window(product).await {
        Ok(Some(window)) => window,
        Ok(None) => return Err(not_loaded_or_unknown(&state, product).await),
        Err(error) => return Err(error.into()),
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

/// How long an order may be queued in Redis before status polling asks MySQL
/// whether it is there after all (the consumer wrote it, but its `mark_confirmed` never
/// reached Redis). An order normally reaches MySQL well within this, so the crowd polling
/// its young orders never reaches MySQL; and the answer is written back to Redis, so an
/// order costs MySQL one look, not one per poll.
pub const ASK_MYSQL_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// Where an order is.
#[derive(Serialize, ToSchema)]
pub struct OrderStatus {
    #[schema(pattern = r"^[0-9]+-[0-9a-f]{32}$")]
    order_token: String,
    #[schema(format = "uint64", maximum = 18_446_744_073_709_551_615_u64)]
    product_id: u64,
    #[schema(format = "uint32", maximum = 4_294_967_295_u32)]
    quantity: u32,
    status: OrderState,
}

/// `queued`: reserved, its order not yet written; `confirmed`: committed (MySQL has it, or
/// will); `failed`: the reservation was given back.
#[derive(Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OrderState {
    Queued,
    Confirmed,
    Failed,
}

/// An order's status.
///
/// The buyer's own orders only: another buyer's, a malformed token and an unknown one are
/// all 404. Counts against the instance-wide rate limit only (clients poll it).
#[utoipa::path(
    get,
    path = "/api/v1/orders/{order_token}",
    tag = "buyer",
    params(("order_token" = String, Path, description = "The order token from the purchase, `<product>-<32 hex>`.")),
    security(("buyer" = [])),
    responses(
        (status = 200, description = "The order.", body = OrderStatus),
        (status = 401, response = Unauthenticated),
        (status = 404, response = NotFound),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    )
)]
pub async fn order_status(
    state: web::Data<AppState>,
    path: web::Path<String>,
    buyer: Buyer,
) -> Result<HttpResponse, ApiError> {
    // Only the instance-wide limit: clients poll this while their order is queued, and the
    // per-buyer budget is for the buy path.
    state.limits.check_global()?;
    // A token that does not parse names no order: same answer as an unknown one.
    let token: OrderToken = path.parse().map_err(|_| ApiError::NotFound("order"))?;
    let (owner, quantity, status) = match state.cache.order_view(&token).await {
        Ok(view) => match (&view.flow, &view.tombstone) {
            (Some(flow), _) => (
                flow.user_id,
                flow.quantity,
                if view.confirmed {
                    OrderState::Confirmed
                } else {
                    queued_or_written(&state, &token, flow).await
                },
            ),
            (None, Some(tomb)) if tomb.user_id.is_some() => (
                tomb.user_id.expect("checked"),
                tomb.quantity.unwrap_or(0),
                OrderState::Failed,
            ),
            _ => from_mysql(&state, &token).await?,
        },
        // Redis is down: MySQL still knows every confirmed order.
        Err(_) => from_mysql(&state, &token).await?,
    };
    if owner != buyer.0 {
        // Another buyer's order is answered as unknown: its existence is not ours to tell.
        return Err(ApiError::NotFound("order"));
    }
    Ok(HttpResponse::Ok().json(OrderStatus {
        order_token: token.to_string(),
        product_id: token.product_id().get(),
        quantity,
        status,
    }))
}

/// A flow Redis has no confirmation for: queued, unless it was reserved long enough ago
/// ([`ASK_MYSQL_AFTER`]) that MySQL may hold its order while the confirmation was lost. A
/// few such looks at once per gateway: past them, or when MySQL cannot answer, the order
/// stays `queued` for this poll and the next one asks again.
async fn queued_or_written(
    state: &AppState,
    token: &OrderToken,
    flow: &domain::FlowRecord,
) -> OrderState {
    /// Looks at MySQL under way at once, so that even a crowd of stale orders (a stopped
    /// consumer's backlog) puts a bounded load on it.
    static MYSQL_LOOKS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

    let age_ms = Utc::now().timestamp_millis() - flow.reserved_at_ms;
    let stale = u128::try_from(age_ms).is_ok_and(|age| age >= ASK_MYSQL_AFTER.as_millis());
    if !stale {
        return OrderState::Queued;
    }
    let Ok(_look) = MYSQL_LOOKS.try_acquire() else {
        return OrderState::Queued;
    };
    match state.db.order(token).await {
        Ok(Some(_)) => {
            if let Err(error) = state
                .cache
                .mark_confirmed(std::slice::from_ref(token))
                .await
            {
                tracing::warn!(order = %token.short(), error = %error, "Could not record in Redis an order MySQL holds.");
            }
            OrderState::Confirmed
        }
        Ok(None) => OrderState::Queued,
        Err(error) => {
            tracing::warn!(order = %token.short(), error = %error, "MySQL did not answer whether a queued order is written.");
            OrderState::Queued
        }
    }
}

async fn from_mysql(
    state: &AppState,
    token: &OrderToken,
) -> Result<(domain::UserId, u32, OrderState), ApiError> {
    let order = state
        .db
        .order(token)
        .await?
        .ok_or(ApiError::NotFound("order"))?;
    Ok((order.user_id, order.quantity, OrderState::Confirmed))
}
