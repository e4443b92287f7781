//! The buyer's endpoints: a purchase token, the purchase, the order's status.

use actix_web::{HttpResponse, web};
use chrono::{DateTime, SecondsFormat, Utc};
use domain::{OrderToken, PurchaseClaims, TokenError};
use platform::telemetry::short_token;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::identity::Buyer;
use crate::routes::{AppState, product_id};

#[derive(Serialize)]
struct TokenIssued {
    token: String,
    expires_at: String,
}

pub async fn issue_token(
    state: web::Data<AppState>,
    path: web::Path<String>,
    buyer: Buyer,
) -> Result<HttpResponse, ApiError> {
    state.limits.check_global()?;
    let product = product_id(&path)?;
    state.limits.check_user(buyer.0)?;

    let meta = match state.cache.meta(product).await {
        Ok(Some(meta)) => meta,
        Ok(None) => return Err(not_loaded_or_unknown(&state, product).await),
        Err(error) => return Err(ApiError::unavailable("Redis cannot be reached", error)),
    };
    let now = Utc::now();
    let now_ms = now.timestamp_millis();
    if now_ms < meta.starts_at_ms || (meta.ends_at_ms > 0 && now_ms >= meta.ends_at_ms) {
        return Err(ApiError::SaleNotOpen);
    }

    let expires_at = now + state.token_ttl;
    let claims = PurchaseClaims {
        order_token: OrderToken::random(product),
        user_id: buyer.0,
        expires_at_ms: expires_at.timestamp_millis(),
    };
    metrics::counter!("seckill_tokens_issued_total").increment(1);
    Ok(HttpResponse::Created().json(TokenIssued {
        token: state.signer.issue(&claims),
        expires_at: expires_at.to_rfc3339_opts(SecondsFormat::Millis, true),
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

#[derive(Deserialize)]
pub struct PurchaseRequest {
    token: String,
    quantity: u32,
}

#[derive(Serialize)]
struct Queued {
    order_token: String,
    status: &'static str,
}

#[tracing::instrument(name = "purchase", skip_all, fields(product_id = %path.as_str(), user_id = %buyer.0))]
pub async fn purchase(
    state: web::Data<AppState>,
    path: web::Path<String>,
    buyer: Buyer,
    body: web::Json<PurchaseRequest>,
) -> Result<HttpResponse, ApiError> {
    state.limits.check_global()?;
    let product = product_id(&path)?;
    state.limits.check_user(buyer.0)?;
    if body.quantity == 0 {
        return Err(ApiError::BadRequest("quantity must be at least 1".into()));
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

    state.desk.purchase(&claims, body.quantity).await?;
    tracing::info!(order = %short_token(&claims.order_token), quantity = body.quantity, "Purchase queued.");
    Ok(HttpResponse::Accepted().json(Queued {
        order_token: claims.order_token.to_string(),
        status: "queued",
    }))
}

#[derive(Serialize)]
struct OrderStatus {
    order_token: String,
    product_id: u64,
    quantity: u32,
    status: &'static str,
}

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
                    "confirmed"
                } else {
                    "queued"
                },
            ),
            (None, Some(tomb)) if tomb.user_id.is_some() => (
                tomb.user_id.expect("checked"),
                tomb.quantity.unwrap_or(0),
                "failed",
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

async fn from_mysql(
    state: &AppState,
    token: &OrderToken,
) -> Result<(domain::UserId, u32, &'static str), ApiError> {
    let order = state
        .db
        .order(token)
        .await
        .map_err(|e| ApiError::unavailable("MySQL cannot be reached", e))?
        .ok_or(ApiError::NotFound("order"))?;
    Ok((order.user_id, order.quantity, "confirmed"))
}

/// RFC 3339 of unix milliseconds; 0 means "not set".
pub fn rfc3339_ms(ms: i64) -> Option<String> {
    (ms != 0)
        .then(|| DateTime::<Utc>::from_timestamp_millis(ms))
        .flatten()
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}
