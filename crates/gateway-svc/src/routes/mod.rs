//! HTTP handlers: parse and check the request, call the state, shape the answer.

pub mod admin;
pub mod buyer;
pub mod docs;
pub mod orders;
pub mod payments;
pub mod reload;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{
    HttpRequest, HttpResponse, ResponseError, Route, error::JsonPayloadError, error::PathError,
    error::QueryPayloadError, guard, web,
};
use chrono::{DateTime, SecondsFormat, Utc};
use domain::{ProductId, TokenSigner};
use order_queue::OrderBacklog;
use order_store::Db;
use serde::de::{Deserialize, Deserializer, Error as _, Unexpected};
use stock_cache::StockCache;
use utoipa::IntoParams;

use crate::error::ApiError;
use crate::openapi;
use crate::purchase::PurchaseDesk;
use crate::rate_limit::RateLimits;
use crate::sale_windows::SaleWindows;
use crate::sold_out::SoldOutFlags;
use crate::watch::OrderWatch;

/// Everything the handlers use; one per HTTP worker, with that worker's own Redis and
/// MySQL pools (see `startup`), the rest shared by all.
pub struct AppState {
    pub cache: StockCache,
    pub db: Db,
    pub desk: Arc<PurchaseDesk>,
    pub signer: TokenSigner,
    pub limits: Arc<RateLimits>,
    pub sold_out: Arc<SoldOutFlags>,
    pub sale_windows: Arc<SaleWindows>,
    pub token_ttl: Duration,
    /// Asked by a reload: the order messages not yet written to MySQL.
    pub backlog: Arc<OrderBacklog>,
    pub reload_drain: Duration,
    /// This gateway's name on the leases it takes (`platform::instance`): unique to the
    /// application, whatever its PID.
    pub lease_holder: Arc<str>,
    /// The event streams and long-polls held on this gateway.
    pub watch: Arc<OrderWatch>,
    /// A watcher reads its order again at least this often (`orders.watch_recheck_secs`).
    pub watch_recheck: Duration,
}

/// The `{product_id}` of the product routes, as the OpenAPI document describes it. The
/// handlers take the raw segment and parse it with [`product_id`], so that a bad one is
/// answered with the API's 400 rather than the extractor's.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ProductPath {
    /// The product: decimal digits, a u64.
    #[param(format = "uint64", maximum = 18_446_744_073_709_551_615_u64)]
    pub product_id: u64,
}

/// A JSON number with no fractional part (`2`, `2.0`, `2e0`), as a `T`, for the body fields
/// the OpenAPI document calls `integer`. JSON has one number type and JSON Schema counts
/// `2.0` as an integer, so refusing it, as serde does for an integer type, would refuse
/// input the document allows. A fraction, a string or a value out of `T`'s range is still
/// an error (400).
pub fn whole_number<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64> + TryFrom<i64>,
{
    let number = serde_json::Number::deserialize(deserializer)?;
    let whole = if let Some(n) = number.as_u64() {
        T::try_from(n).ok()
    } else if let Some(n) = number.as_i64() {
        T::try_from(n).ok()
    } else {
        // 2^64 and -2^63 are exact in an f64; within them `as` converts a whole value exactly.
        number.as_f64().and_then(|f| match f {
            f if f.fract() != 0.0 => None,
            f if (0.0..18_446_744_073_709_551_616.0).contains(&f) => T::try_from(f as u64).ok(),
            f if (-9_223_372_036_854_775_808.0..0.0).contains(&f) => T::try_from(f as i64).ok(),
            _ => None,
        })
    };
    whole.ok_or_else(|| {
        D::Error::invalid_value(
            Unexpected::Other(&format!("the number {number}")),
            &"a whole number in range",
        )
    })
}

/// RFC 3339 of unix milliseconds; 0 means "not set".
pub fn rfc3339_ms(ms: i64) -> Option<String> {
    (ms != 0)
        .then(|| DateTime::<Utc>::from_timestamp_millis(ms))
        .flatten()
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// `{product_id}` as a u64, or 400.
pub fn product_id(raw: &str) -> Result<ProductId, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::BadRequest(format!("product id `{raw}` is not a u64")))
}

/// The ops endpoints that `platform::ops` mounts on the gateway's servers, all `GET`.
/// Listed here because their handlers live in `platform`.
pub const OPS_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// Which of the gateway's endpoints one of its servers answers. With `gateway.ops_listen`
/// unset, one server answers everything, as the API documents it; set, the public port
/// answers buyers and the payment provider, and the ops port the operators and Prometheus,
/// so that a network policy can keep `/admin` and `/metrics` from the internet. Both answer
/// the probes: the kubelet asks the public port whether buyers are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    Everyone,
    Public,
    Operators,
}

impl Audience {
    pub fn answers(self, path: &str) -> bool {
        let for_operators = path.starts_with("/admin/") || path == "/metrics";
        let probe = path == "/healthz" || path == "/readyz";
        match self {
            Audience::Everyone => true,
            Audience::Public => !for_operators,
            Audience::Operators => for_operators || probe,
        }
    }
}

/// The gateway's own routes: (method, path, handler, which requests need no span — see
/// `platform::http::traced`). [`configure`] mounts exactly these, and [`routes`] lists them
/// for the test that holds the OpenAPI document to what is mounted, so a route added here
/// without its documentation fails that test.
///
/// The purchase comes first: actix-web's router tries the routes in this order, and each
/// path with a `{segment}` it tries costs a run of its regex matcher, which is a large part
/// of a refusal's cost after sell-out, when the crowd hammers that one route. No two paths
/// here can match the same request, so the order changes nothing else.
fn api_routes() -> Vec<(Method, &'static str, Route, Option<Quiet>)> {
    vec![
        (
            Method::POST,
            "/api/v1/products/{product_id}/purchase",
            web::to(buyer::purchase),
            Some(buyer::quiet_purchase),
        ),
        (
            Method::POST,
            "/api/v1/products/{product_id}/tokens",
            web::to(buyer::issue_token),
            None,
        ),
        (
            Method::GET,
            "/api/v1/orders/{order_token}",
            web::to(orders::order_status),
            None,
        ),
        (
            Method::GET,
            "/api/v1/orders/{order_token}/events",
            web::to(orders::order_events),
            None,
        ),
        (
            Method::POST,
            "/api/v1/orders/{order_token}/cancel",
            web::to(orders::cancel_order),
            None,
        ),
        (
            Method::POST,
            "/api/v1/payments/notify",
            web::to(payments::notify_payment),
            None,
        ),
        (
            Method::PUT,
            "/admin/v1/products/{product_id}",
            web::to(admin::put_product),
            None,
        ),
        (
            Method::GET,
            "/admin/v1/products/{product_id}",
            web::to(admin::get_product),
            None,
        ),
        (
            Method::POST,
            "/admin/v1/products/{product_id}/reload",
            web::to(reload::reload_product),
            None,
        ),
        (Method::GET, openapi::PATH, web::to(docs::serve), None),
    ]
}

/// Every (method, path) a server of the gateway answers: its own routes and the ops
/// endpoints, those of `audience`.
pub fn routes(audience: Audience) -> Vec<(Method, &'static str)> {
    api_routes()
        .into_iter()
        .map(|(method, path, ..)| (method, path))
        .chain(OPS_PATHS.map(|path| (Method::GET, path)))
        .filter(|(_, path)| audience.answers(path))
        .collect()
}

/// Registers the routes of `audience`, with the extractor errors mapped to the API's error
/// shape. Call it after `platform::ops`' mounts: the 405 fallbacks registered here cover
/// the ops paths too, and a fallback must come after the routes of its path.
pub fn configure(cfg: &mut web::ServiceConfig, max_body_bytes: usize, audience: Audience) {
    cfg.app_data(
        web::JsonConfig::default()
            .limit(max_body_bytes)
            .error_handler(json_error),
    )
    .app_data(web::PathConfig::default().error_handler(path_error))
    .app_data(web::QueryConfig::default().error_handler(query_error))
    .app_data(web::PayloadConfig::new(max_body_bytes));
    // Each route is a resource guarded by its method (as `ServiceConfig::route` makes
    // them), wrapped in its request span, which is told its route here: no one matches
    // the path again to find it.
    for (method, path, route, quiet) in api_routes() {
        if !audience.answers(path) {
            continue;
        }
        cfg.service(
            web::resource(path)
                .guard(guard::Method(method))
                .wrap_fn(move |request, service| {
                    platform::http::traced(path, quiet, request, service)
                })
                .route(route),
        );
    }
    // A request for a known path with another method falls through to here: a 405 that
    // names the methods the path has (an unknown path goes on to the app's 404).
    let mut allowed: BTreeMap<&str, Vec<Method>> = BTreeMap::new();
    for (method, path) in routes(audience) {
        allowed.entry(path).or_default().push(method);
    }
    for (path, methods) in allowed {
        let allow = methods
            .iter()
            .map(Method::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        let resource = web::resource(path).default_service(web::to(move || {
            let allow = allow.clone();
            async move { ApiError::MethodNotAllowed(allow).error_response() }
        }));
        // The ops endpoints' requests have no span (see `platform::http`), whatever the method.
        if OPS_PATHS.contains(&path) {
            cfg.service(resource);
        } else {
            cfg.service(resource.wrap_fn(move |request, service| {
                platform::http::traced(path, None, request, service)
            }));
        }
    }
}

/// Which requests of a route need no span while spans are not exported; see
/// `platform::http::traced`.
type Quiet = fn(&ServiceRequest) -> bool;

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

/// The largest header block a request may carry (names, values and their separators).
#[derive(Debug, Clone, Copy)]
pub struct HeaderCap(pub usize);

/// Refuses a request whose headers are larger than [`HeaderCap`] with 431, before any
/// handler or extractor reads them. actix-web's own parser takes far larger blocks (a
/// 64 KiB header passed it), and every byte of them would be kept for the request's life.
///
/// The refusal is a response, not an `Err`: an error leaves the request behind, and
/// `platform::http::observe` reads the route for its series from the request the response
/// carries.
pub async fn cap_headers(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    if let Some(HeaderCap(cap)) = request.app_data::<HeaderCap>().copied() {
        // As on the wire: "name: value\r\n".
        let size: usize = request
            .headers()
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 4)
            .sum();
        if size > cap {
            // Refused before routing: no route's span is open yet.
            let route = request.match_pattern();
            let route = route.as_deref().unwrap_or("unmatched");
            let span = platform::http::request_span(request.method(), route, request.headers());
            let response = span.in_scope(|| request.error_response(ApiError::HeadersTooLarge(cap)));
            platform::http::record_status(&span, response.status().as_u16());
            return Ok(response.map_into_right_body());
        }
    }
    next.call(request)
        .await
        .map(ServiceResponse::map_into_left_body)
}

fn path_error(error: PathError, _: &HttpRequest) -> actix_web::Error {
    ApiError::BadRequest(format!("bad path: {error}")).into()
}

fn query_error(error: QueryPayloadError, _: &HttpRequest) -> actix_web::Error {
    ApiError::BadRequest(format!("bad query string: {error}")).into()
}

/// Answers every unknown route with the API's 404 (in a span of its own: no route's span
/// covers it).
pub async fn not_found(request: HttpRequest) -> HttpResponse {
    let span = platform::http::request_span(request.method(), "unmatched", request.headers());
    let response = span.in_scope(|| ApiError::NotFound("route").error_response());
    platform::http::record_status(&span, response.status().as_u16());
    response
}
