//! The API's errors: each variant is one row of the error table in docs/api.md.
//!
//! Policy: a handler returns `ApiError`; the body is always
//! `{"error": {"code", "message"}}`. Dependency failures become `Unavailable` (503) by
//! `From` (Redis's, MySQL's and the broker's errors, below), so a handler writes `?`; their
//! whole cause chain is logged here, on one line — never sent to the client.
//!
//! At most [`UNAVAILABLE_LINES_PER_SEC`] such lines a second: when Redis, MySQL or the broker
//! is down under a crowd, every purchase fails the same way, and a line per request (with a
//! stack backtrace each while `RUST_BACKTRACE` is set) once filled a disk with 25 GB of log
//! in minutes. The HTTP metrics still count every 503; the next line logged says how many
//! were left out.

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::mime;
use actix_web::web::Bytes;
use actix_web::{HttpResponse, ResponseError};
use domain::{Cause, OrderToken, PurchaseOutcome, Refusal, TokenRefusal, Unsettled};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde::Serialize;
use std::num::NonZeroU32;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most 503 causes logged per second (see the module docs).
pub const UNAVAILABLE_LINES_PER_SEC: NonZeroU32 = NonZeroU32::new(10).expect("not zero");

static UNAVAILABLE_LINES: LazyLock<DefaultDirectRateLimiter> =
    LazyLock::new(|| RateLimiter::direct(Quota::per_second(UNAVAILABLE_LINES_PER_SEC)));

/// 503 causes not logged since the last line.
static UNAVAILABLE_UNLOGGED: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("the request's headers are larger than {0} bytes")]
    HeadersTooLarge(usize),
    #[error("{0}")]
    Unauthenticated(&'static str),
    #[error("the purchase token is {0}")]
    InvalidToken(&'static str),
    #[error("the sale is not open")]
    SaleNotOpen,
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("this token was already used")]
    Duplicate,
    #[error("you already hold the per-user limit for this product")]
    LimitExceeded,
    #[error("sold out")]
    SoldOut,
    #[error("the product has orders; send \"force\": true to restock it")]
    OrdersExist,
    #[error(
        "{sold} units of the sale are sold already, more than the {wanted} asked for in all; nothing changed"
    )]
    StockBelowSold { sold: i64, wanted: i64 },
    #[error("the product is loaded in Redis; a reload only rebuilds a product Redis lost")]
    ProductLoaded,
    #[error(
        "{0} order message(s) are still on their way to MySQL; reload again once the order consumers have caught up"
    )]
    OrdersInFlight(u64),
    #[error("the order is {0}; it can no longer change")]
    OrderClosed(domain::OrderStatus),
    #[error("the order is still queued; ask again once it is confirmed")]
    NotConfirmed,
    #[error("the payment is {paid} cents; the order costs {expected}")]
    AmountMismatch { expected: u64, paid: u64 },
    /// A known path asked with a method it does not have; carries the `Allow` value.
    #[error("this path takes {0}")]
    MethodNotAllowed(String),
    #[error("too many requests")]
    RateLimited { retry_after_secs: u64 },
    #[error("{message}")]
    Unavailable {
        message: &'static str,
        #[source]
        cause: Option<anyhow::Error>,
    },
}

impl ApiError {
    /// The cause chain on one line (`{:#}`: no backtrace), within the lines-per-second
    /// budget.
    fn log_unavailable(&self, cause: &anyhow::Error) {
        if UNAVAILABLE_LINES.check().is_err() {
            UNAVAILABLE_UNLOGGED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let unlogged = UNAVAILABLE_UNLOGGED.swap(0, Ordering::Relaxed);
        tracing::warn!(error = %format_args!("{cause:#}"), code = self.code(), unlogged, "{self}");
    }

    /// Logs what made a 503 (see [`ApiError::log_unavailable`]); nothing for the other
    /// refusals, which are the buyer's to read. Writing the answer does it, and so does a
    /// purchase whose answer nobody is left to read.
    pub fn log_cause(&self) {
        if let Self::Unavailable {
            cause: Some(cause), ..
        } = self
        {
            self.log_unavailable(cause);
        }
    }

    pub fn unavailable(message: &'static str, cause: impl Into<anyhow::Error>) -> Self {
        Self::Unavailable {
            message,
            cause: Some(cause.into()),
        }
    }

    /// One error of each kind. The OpenAPI document builds every error response from this
    /// list, so that each status names exactly the codes that map to it.
    pub fn every_kind() -> [ApiError; 20] {
        let every = [
            Self::BadRequest(String::new()),
            Self::PayloadTooLarge(String::new()),
            Self::HeadersTooLarge(0),
            Self::Unauthenticated(""),
            Self::InvalidToken(""),
            Self::SaleNotOpen,
            Self::NotFound(""),
            Self::Duplicate,
            Self::LimitExceeded,
            Self::SoldOut,
            Self::OrdersExist,
            Self::StockBelowSold { sold: 0, wanted: 0 },
            Self::ProductLoaded,
            Self::OrdersInFlight(0),
            Self::OrderClosed(domain::OrderStatus::Paid),
            Self::NotConfirmed,
            Self::AmountMismatch {
                expected: 0,
                paid: 0,
            },
            Self::MethodNotAllowed(String::new()),
            Self::RateLimited {
                retry_after_secs: 1,
            },
            Self::Unavailable {
                message: "",
                cause: None,
            },
        ];
        // No wildcard: a new variant stops this from compiling until it is listed above too.
        for error in &every {
            match error {
                Self::BadRequest(_)
                | Self::PayloadTooLarge(_)
                | Self::HeadersTooLarge(_)
                | Self::Unauthenticated(_)
                | Self::InvalidToken(_)
                | Self::SaleNotOpen
                | Self::NotFound(_)
                | Self::Duplicate
                | Self::LimitExceeded
                | Self::SoldOut
                | Self::OrdersExist
                | Self::StockBelowSold { .. }
                | Self::ProductLoaded
                | Self::OrdersInFlight(_)
                | Self::OrderClosed(_)
                | Self::NotConfirmed
                | Self::AmountMismatch { .. }
                | Self::MethodNotAllowed(_)
                | Self::RateLimited { .. }
                | Self::Unavailable { .. } => {}
            }
        }
        every
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "BAD_REQUEST",
            Self::PayloadTooLarge(_) => "PAYLOAD_TOO_LARGE",
            Self::HeadersTooLarge(_) => "HEADERS_TOO_LARGE",
            Self::Unauthenticated(_) => "UNAUTHENTICATED",
            Self::InvalidToken(_) => "INVALID_TOKEN",
            Self::SaleNotOpen => "SALE_NOT_OPEN",
            Self::NotFound(_) => "NOT_FOUND",
            Self::Duplicate => "DUPLICATE",
            Self::LimitExceeded => "LIMIT_EXCEEDED",
            Self::SoldOut => "SOLD_OUT",
            Self::OrdersExist => "ORDERS_EXIST",
            Self::StockBelowSold { .. } => "STOCK_BELOW_SOLD",
            Self::ProductLoaded => "PRODUCT_LOADED",
            Self::OrdersInFlight(_) => "ORDERS_IN_FLIGHT",
            Self::OrderClosed(_) => "ORDER_CLOSED",
            Self::NotConfirmed => "NOT_CONFIRMED",
            Self::AmountMismatch { .. } => "AMOUNT_MISMATCH",
            Self::MethodNotAllowed(_) => "METHOD_NOT_ALLOWED",
            Self::RateLimited { .. } => "RATE_LIMITED",
            Self::Unavailable { .. } => "UNAVAILABLE",
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::HeadersTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Self::InvalidToken(_) | Self::SaleNotOpen => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Duplicate
            | Self::LimitExceeded
            | Self::SoldOut
            | Self::OrdersExist
            | Self::StockBelowSold { .. }
            | Self::ProductLoaded
            | Self::OrdersInFlight(_)
            | Self::OrderClosed(_)
            | Self::NotConfirmed
            | Self::AmountMismatch { .. } => StatusCode::CONFLICT,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        self.log_cause();
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Self::RateLimited { retry_after_secs } => {
                response.insert_header((
                    header::RETRY_AFTER,
                    HeaderValue::from(retry_after_secs.max(&1).to_owned()),
                ));
            }
            // The consumer writes a queued order within moments; a second is a fair wait.
            Self::NotConfirmed => {
                response.insert_header((header::RETRY_AFTER, HeaderValue::from(1)));
            }
            Self::MethodNotAllowed(allow) => {
                if let Ok(allow) = HeaderValue::from_str(allow) {
                    response.insert_header((header::ALLOW, allow));
                }
            }
            _ => {}
        }
        match self.fixed_body() {
            // The crowd's refusals (409 after sell-out, above all): the same bytes every time.
            Some(body) => response
                .content_type(mime::APPLICATION_JSON)
                .body(Bytes::from_static(body.as_bytes())),
            None => response.json(self.body()),
        }
    }
}

/// A refused purchase, as the buyer is told it.
impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::RateLimited { retry_after_secs } => Self::RateLimited { retry_after_secs },
            Refusal::QuantityZero => Self::BadRequest("quantity must be at least 1".into()),
            Refusal::QuantityAboveLimit => {
                Self::BadRequest("quantity is above the per-user limit".into())
            }
            Refusal::Token(token) => Self::InvalidToken(match token {
                TokenRefusal::Expired => "expired",
                TokenRefusal::NotValid => "not valid",
                TokenRefusal::ForAnotherBuyer => "for another buyer",
                TokenRefusal::ForAnotherProduct => "for another product",
            }),
            Refusal::SaleNotOpen => Self::SaleNotOpen,
            Refusal::Duplicate => Self::Duplicate,
            Refusal::LimitExceeded => Self::LimitExceeded,
            Refusal::SoldOut => Self::SoldOut,
        }
    }
}

impl ApiError {
    /// The 503 of a purchase that can be told neither yes nor no.
    pub fn unsettled(why: Unsettled, cause: Option<Cause>) -> Self {
        let message = match why {
            Unsettled::StoreUnreachable => "Redis cannot be reached",
            Unsettled::NotLoaded => "the product is not loaded for sale",
            Unsettled::PreDeductUnanswered => "Redis did not answer in time",
            Unsettled::NotReplicated => "Redis replicas did not acknowledge in time",
            Unsettled::Unconfirmed | Unsettled::RolledBack => "the order could not be confirmed",
            Unsettled::BrokerUnreachable => "the broker cannot be reached",
            Unsettled::Unanswered => {
                "the purchase ended without an answer; its order's status tells whether it was placed"
            }
        };
        Self::Unavailable {
            message,
            cause: cause.map(anyhow::Error::from_boxed),
        }
    }
}

/// The answer to a purchase that is not queued; a queued one gives back its order token.
impl TryFrom<PurchaseOutcome> for ApiError {
    type Error = OrderToken;

    fn try_from(outcome: PurchaseOutcome) -> Result<Self, OrderToken> {
        match outcome {
            PurchaseOutcome::Queued { order_token } => Err(order_token),
            PurchaseOutcome::Refused(refusal) => Ok(refusal.into()),
            PurchaseOutcome::Unsettled { why, cause } => Ok(Self::unsettled(why, cause)),
        }
    }
}

/// Redis did not answer, or refused the call: 503.
impl From<stock_cache::CacheError> for ApiError {
    fn from(error: stock_cache::CacheError) -> Self {
        Self::unavailable("Redis cannot be reached", error)
    }
}

/// Redis could not be asked for a sale window: 503.
impl From<crate::sale_windows::ReadFailed> for ApiError {
    fn from(error: crate::sale_windows::ReadFailed) -> Self {
        Self::unavailable("Redis cannot be reached", error)
    }
}

/// MySQL did not answer, or refused the statement: 503.
impl From<order_store::StoreError> for ApiError {
    fn from(error: order_store::StoreError) -> Self {
        Self::unavailable("MySQL cannot be reached", error)
    }
}

/// The broker did not answer: 503.
impl From<order_queue::MqError> for ApiError {
    fn from(error: order_queue::MqError) -> Self {
        Self::unavailable("the broker cannot be reached", error)
    }
}

/// A message that was not sent: 503.
impl From<order_queue::SendFailed> for ApiError {
    fn from(error: order_queue::SendFailed) -> Self {
        Self::unavailable("the broker cannot be reached", error)
    }
}

/// `{"error": {"code", "message"}}`, serialised from a struct (`json!` built a map of
/// owned keys and values first).
#[derive(Serialize)]
struct Body {
    error: Fields,
}

#[derive(Serialize)]
struct Fields {
    code: &'static str,
    message: String,
}

impl ApiError {
    fn body(&self) -> Body {
        Body {
            error: Fields {
                code: self.code(),
                message: self.to_string(),
            },
        }
    }

    /// The body of the errors whose message never changes, written out; a test holds each
    /// to what [`ApiError::body`] would serialise.
    fn fixed_body(&self) -> Option<&'static str> {
        Some(match self {
            Self::SaleNotOpen => {
                r#"{"error":{"code":"SALE_NOT_OPEN","message":"the sale is not open"}}"#
            }
            Self::Duplicate => {
                r#"{"error":{"code":"DUPLICATE","message":"this token was already used"}}"#
            }
            Self::LimitExceeded => {
                r#"{"error":{"code":"LIMIT_EXCEEDED","message":"you already hold the per-user limit for this product"}}"#
            }
            Self::SoldOut => r#"{"error":{"code":"SOLD_OUT","message":"sold out"}}"#,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::to_bytes;

    #[actix_web::test]
    async fn errors_render_as_the_contract_says() {
        let response = ApiError::RateLimited {
            retry_after_secs: 2,
        }
        .error_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers().get(header::RETRY_AFTER).unwrap(), "2");
        let body = to_bytes(response.into_body()).await.unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"]["code"], "RATE_LIMITED");
    }

    #[test]
    fn every_kind_lists_each_code_once() {
        let codes: std::collections::BTreeSet<_> =
            ApiError::every_kind().iter().map(ApiError::code).collect();
        assert_eq!(codes.len(), ApiError::every_kind().len());
    }

    #[test]
    fn a_fixed_body_is_what_the_error_would_serialise_to() {
        let mut fixed = 0;
        for error in ApiError::every_kind() {
            if let Some(body) = error.fixed_body() {
                fixed += 1;
                assert_eq!(body, serde_json::to_string(&error.body()).unwrap());
            }
        }
        assert_eq!(fixed, 4);
    }

    #[actix_web::test]
    async fn a_fixed_body_is_sent_as_json() {
        let response = ApiError::SoldOut.error_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(
            response.headers().get(header::CONTENT_TYPE).unwrap(),
            "application/json"
        );
        let body = to_bytes(response.into_body()).await.unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"]["code"], "SOLD_OUT");
        assert_eq!(json["error"]["message"], "sold out");
    }

    #[test]
    fn a_dependency_failure_is_a_503_that_names_the_dependency() {
        let redis = ApiError::from(stock_cache::CacheError::NotLoaded);
        assert_eq!(redis.status_code(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(redis.to_string(), "Redis cannot be reached");
        let mysql = ApiError::from(order_store::StoreError::InvalidData("x".into()));
        assert_eq!(mysql.to_string(), "MySQL cannot be reached");
        let broker = ApiError::from(order_queue::MqError::ShutDown);
        assert_eq!(broker.to_string(), "the broker cannot be reached");
        assert_eq!(broker.code(), "UNAVAILABLE");
    }

    #[test]
    fn every_conflict_is_a_409() {
        for error in [
            ApiError::Duplicate,
            ApiError::LimitExceeded,
            ApiError::SoldOut,
        ] {
            assert_eq!(error.status_code(), StatusCode::CONFLICT);
        }
    }

    /// What a subscriber writes, kept for the test to read.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn lines(&self) -> Vec<String> {
            let bytes = self.0.lock().unwrap();
            String::from_utf8_lossy(&bytes)
                .lines()
                .map(str::to_owned)
                .collect()
        }
    }

    #[test]
    fn a_storm_of_503s_logs_a_few_one_line_causes_and_counts_the_rest() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let storm = 1_000;
        let started = std::time::Instant::now();
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..storm {
                let cause =
                    anyhow::anyhow!("connection refused").context("broker.operation.failed");
                ApiError::unavailable("the broker cannot be reached", cause).error_response();
            }
            std::thread::sleep(std::time::Duration::from_millis(1_100));
            let cause = anyhow::anyhow!("connection refused");
            ApiError::unavailable("the broker cannot be reached", cause).error_response();
        });

        let lines = captured.lines();
        // The burst, and what refilled while the storm ran (other tests share the budget).
        let budget =
            UNAVAILABLE_LINES_PER_SEC.get() as usize * (2 + started.elapsed().as_secs() as usize);
        assert!(
            !lines.is_empty() && lines.len() <= budget,
            "{} lines for {storm} answers",
            lines.len()
        );
        assert!(
            lines[0].contains("broker.operation.failed: connection refused"),
            "the cause chain on one line: {}",
            lines[0]
        );
        assert!(
            lines
                .iter()
                .all(|line| line.contains("the broker cannot be reached")),
            "no backtrace or other continuation lines: {lines:?}"
        );
        let last = lines.last().unwrap();
        assert!(
            !last.contains("unlogged=0"),
            "the line after the storm counts what it left out: {last}"
        );
    }
}
