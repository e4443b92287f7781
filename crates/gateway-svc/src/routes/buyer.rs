//! The buyer's endpoints: a purchase token, the purchase, the order's status.

use std::sync::Arc;

use actix_web::dev::ServiceRequest;
use actix_web::{HttpResponse, web};
use chrono::{DateTime, SecondsFormat, Utc};
use domain::{OrderToken, PurchaseClaims, TokenError};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tracing::Instrument;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::identity::Buyer;
use crate::openapi::{
    BadRequest, Conflict, Forbidden, NotFound, PayloadTooLarge, RateLimited, Unauthenticated,
    Unavailable,
};
use crate::rate_limit::PurchaseSlot;
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
        Err(error) => return Err(ApiError::unavailable("Redis cannot be reached", error)),
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
        Err(error) => ApiError::unavailable("MySQL cannot be reached", error),
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
    // The `purchase` span, but not for a refusal from the sold-out flag while spans are
    // not exported: it logs nothing and sends nothing (see `quiet_purchase`). Should the
    // flag be cleared since this look, the purchase goes on with no span.
    let span = if platform::telemetry::exporting() || !flagged(&state, &path) {
        tracing::info_span!("purchase", product_id = %path.as_str(), user_id = %buyer.0)
    } else {
        tracing::Span::none()
    };
    buy(state, path, buyer, body).instrument(span).await
}

thread_local! {
    /// `seckill_purchases_total{outcome="sold_out"}` (as `purchase::PurchaseDesk` counts
    /// it), registered once per worker thread rather than looked up in the recorder per
    /// refusal. (The recorder is installed before the server starts: a handle taken
    /// earlier would count nowhere.)
    static SOLD_OUT: metrics::Counter =
        metrics::counter!("seckill_purchases_total", "outcome" => "sold_out");
}

/// Whether this gateway has flagged the purchase's product sold out.
fn flagged(state: &AppState, raw_product_id: &str) -> bool {
    product_id(raw_product_id).is_ok_and(|product| state.sold_out.is_sold_out(product))
}

/// Which purchases need no `http_request` span while spans are not exported
/// (`platform::http::traced`): every one that brings no caller's `traceparent` to join.
/// Such a span would carry the method and the route, which the handler's `purchase` span
/// makes plain, and a span is a real part of a request's cost: on the path that stops at
/// pre_deduct (a DUPLICATE), the three spans a purchase had were 18 % of the gateway's
/// CPU (docs/bench/experiments.md). The `purchase` span is then the trace's root, and its ids are
/// what the log lines and the message's `traceparent` carry. A purchase of a product this
/// gateway has flagged sold out needs no span at all (see [`purchase`]): it is refused from
/// the flag, or earlier by a rate limit or a malformed body, and none of those paths logs a
/// line or sends a message.
pub fn quiet_purchase(request: &ServiceRequest) -> bool {
    !request.headers().contains_key("traceparent")
}

async fn buy(
    state: web::Data<AppState>,
    path: web::Path<String>,
    buyer: Buyer,
    body: web::Json<PurchaseRequest>,
) -> Result<HttpResponse, ApiError> {
    state.limits.check_global()?;
    let product = product_id(&path)?;
    if body.quantity == 0 {
        return Err(ApiError::BadRequest("quantity must be at least 1".into()));
    }
    // The local sold-out flag (which the purchase desk also checks first), before the
    // token's signature: the signature guards what a purchase changes, a reservation, and
    // a refusal from the flag changes nothing. After sell-out, when the crowd's requests
    // are all refused here, verifying each token (HMAC-SHA256) was a twentieth of the
    // CPU of each. So a forged or expired token for a sold-out product is told 409
    // SOLD_OUT, not 403 INVALID_TOKEN: what it would have been told with a valid token.
    if state.sold_out.is_sold_out(product) {
        SOLD_OUT.with(|counter| counter.increment(1));
        return Err(ApiError::SoldOut);
    }

    let claims = state
        .signer
        .verify(&body.token, Utc::now().timestamp_millis())
        .map_err(|error| {
            metrics::counter!("seckill_purchases_total", "outcome" => "invalid_token").increment(1);
            ApiError::InvalidToken(match error {
                TokenError::Expired => "expired",
                TokenError::Malformed | TokenError::UnknownKey | TokenError::BadSignature => {
                    "not valid"
                }
            })
        })?;
    if claims.user_id != buyer.0 {
        return Err(ApiError::InvalidToken("for another buyer"));
    }
    if claims.product_id() != product {
        return Err(ApiError::InvalidToken("for another product"));
    }
    // A place among the purchases under way, held until this one is answered. Taken after
    // the token check, so a forged token never holds one; before the buyer's budget, so a
    // purchase refused for want of one costs the buyer nothing.
    let slot = state.limits.enter_purchase()?;
    // The buyer's budget counts purchases that could reserve something: a malformed,
    // forged or foreign one is refused above without spending it (bad input changes
    // nothing), and the HMAC it costs is a microsecond.
    state.limits.check_user(buyer.0)?;

    let order_token = claims.order_token.clone();
    detached_purchase(state.into_inner(), claims, body.quantity, slot).await?;
    Ok(HttpResponse::Accepted().json(Queued {
        order_token: order_token.to_string(),
        status: QueuedStatus::Queued,
    }))
}

/// Runs the purchase to its end on a task of its own, holding its in-flight slot, and
/// answers with its outcome. actix-web ends a request's handler when its connection is
/// reset (a killed client, a proxy that gives up), and a purchase inside the handler then
/// stopped wherever it was: after the pre-deduct and before the message, say, leaving the
/// unit reserved for no one until reconcile. Detached, a purchase nobody waits for any more
/// still sends its message, or gives its unit back. The task runs on the same worker thread
/// (`actix_web::rt::spawn`): no hand-off to another thread. (It also keeps the purchase's
/// large future — the pre-deduct, the send, their retries — out of the handler's, which
/// actix-web moves several times per request.)
async fn detached_purchase(
    state: Arc<AppState>,
    claims: PurchaseClaims,
    quantity: u32,
    slot: PurchaseSlot,
) -> Result<(), ApiError> {
    let (answer, answered) = oneshot::channel();
    actix_web::rt::spawn(
        async move {
            let outcome = state.desk.purchase(&claims, quantity).await;
            drop(slot);
            // Only for the lines below: most refusals log nothing.
            let order = || claims.order_token.short();
            if outcome.is_ok() {
                tracing::info!(order = %order(), quantity, "Purchase queued.");
            }
            if let Err(unheard) = answer.send(outcome) {
                let outcome = if unheard.is_ok() { "accepted" } else { "refused" };
                metrics::counter!("seckill_purchases_unheard_total", "outcome" => outcome)
                    .increment(1);
                match unheard {
                    Ok(()) => tracing::info!(order = %order(), "The buyer hung up before the purchase was answered; it was accepted."),
                    Err(refusal) => {
                        // Written, the answer would have logged its cause.
                        refusal.log_cause();
                        tracing::info!(order = %order(), code = refusal.code(), reason = %refusal, "The buyer hung up before the purchase was answered; it was refused.");
                    }
                }
            }
        }
        .in_current_span(),
    );
    // Dropped without an answer only if the task was: it panicked, or the worker stopped.
    answered.await.map_err(|ended| {
        ApiError::unavailable(
            "the purchase ended without an answer; its order's status tells whether it was placed",
            ended,
        )
    })?
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
        .await
        .map_err(|e| ApiError::unavailable("MySQL cannot be reached", e))?
        .ok_or(ApiError::NotFound("order"))?;
    Ok((order.user_id, order.quantity, OrderState::Confirmed))
}

/// RFC 3339 of unix milliseconds; 0 means "not set".
pub fn rfc3339_ms(ms: i64) -> Option<String> {
    (ms != 0)
        .then(|| DateTime::<Utc>::from_timestamp_millis(ms))
        .flatten()
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}
