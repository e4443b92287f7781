//! The payment provider's server-to-server callback.

use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use domain::{OrderStatus, OrderToken, WebhookKey};
use order_store::{Payment, PaymentOutcome};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::responses::{BadRequest, Conflict, NotFound, RateLimited, Unauthenticated, Unavailable};
use crate::routes::orders::{OrderView, Snapshot, look_up};
use crate::routes::{AppState, whole_number};

/// The header carrying the body's signature.
pub const SIGNATURE_HEADER: &str = "X-Signature";

/// The longest `payment_id` kept (the `payments` table's key).
const MAX_PAYMENT_ID: usize = 128;

/// A payment the provider took for an order.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PaymentNotice {
    /// The provider's id of the payment: a callback repeated with it answers the same.
    #[schema(min_length = 1, max_length = 128)]
    payment_id: String,
    #[schema(pattern = r"^[0-9]+-[0-9a-f]{32}$")]
    order_token: String,
    /// Must be the order's price × quantity.
    #[serde(deserialize_with = "whole_number")]
    #[schema(format = "uint64", minimum = 0)]
    amount_cents: u64,
    #[schema(format = DateTime)]
    paid_at: DateTime<Utc>,
}

/// A payment callback (the provider's server calls it; no buyer).
///
/// Signed: `X-Signature: sha256=<hex HMAC-SHA256 of the raw body with
/// payments.webhook_secret>`; a bad or missing signature is 401 and changes nothing.
/// Idempotent by `payment_id`: the same callback again answers the same. An order already
/// cancelled or expired (or paid by another payment) answers 409 `ORDER_CLOSED`, and the
/// payment is recorded as due for refund; an amount other than price × quantity is 409
/// `AMOUNT_MISMATCH`; an order still queued 409 `NOT_CONFIRMED` (with `Retry-After`).
#[utoipa::path(
    post,
    path = "/api/v1/payments/notify",
    tag = "payments",
    request_body = PaymentNotice,
    params(("X-Signature" = String, Header, description = "`sha256=<hex HMAC-SHA256 of the raw body>`")),
    responses(
        (status = 200, description = "The order, paid.", body = OrderView),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    )
)]
pub async fn notify_payment(
    state: web::Data<AppState>,
    key: web::Data<WebhookKey>,
    request: HttpRequest,
    body: Bytes,
) -> Result<HttpResponse, ApiError> {
    state.limits.check_global()?;
    let signature = request
        .headers()
        .get(SIGNATURE_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if !key.verifies(&body, signature) {
        return Err(ApiError::Unauthenticated(
            "bad or missing payment signature",
        ));
    }
    let notice: PaymentNotice = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("malformed payment: {e}")))?;
    let payment = notice.into_payment()?;
    let token = payment.order_token.clone();
    match order_lifecycle::pay(&state.db, &state.cache, &payment).await? {
        PaymentOutcome::Paid(row) => Ok(HttpResponse::Ok().json(Snapshot::of_row(&row).view)),
        PaymentOutcome::Closed(row) => Err(ApiError::OrderClosed(row.status)),
        PaymentOutcome::AmountMismatch { expected_cents } => Err(ApiError::AmountMismatch {
            expected: expected_cents,
            paid: payment.amount_cents,
        }),
        PaymentOutcome::Unknown => match look_up(&state, &token).await? {
            Some(order) if order.status() == OrderStatus::Queued => Err(ApiError::NotConfirmed),
            _ => Err(ApiError::NotFound("order")),
        },
    }
}

impl PaymentNotice {
    fn into_payment(self) -> Result<Payment, ApiError> {
        let id_ok = (1..=MAX_PAYMENT_ID).contains(&self.payment_id.len())
            && self.payment_id.bytes().all(|b| b.is_ascii_graphic());
        if !id_ok {
            return Err(ApiError::BadRequest(format!(
                "payment_id must be 1 to {MAX_PAYMENT_ID} printable ASCII characters"
            )));
        }
        // A token that does not parse names no order: same answer as an unknown one.
        let order_token: OrderToken = self
            .order_token
            .parse()
            .map_err(|_| ApiError::NotFound("order"))?;
        Ok(Payment {
            payment_id: self.payment_id,
            order_token,
            amount_cents: self.amount_cents,
            paid_at: self.paid_at,
        })
    }
}
