//! One span and two series per HTTP request, as an actix-web middleware:
//! `App::new().wrap(actix_web::middleware::from_fn(platform::http::observe))`.
//!
//! The span (`http_request`, exported as `"<METHOD> <route>"`, kind server) is the root of a
//! purchase's trace — or a child of the caller's, when the request brings a W3C
//! `traceparent`. The series are `seckill_http_requests_total{method,route,status}` and
//! `seckill_http_request_duration_seconds{method,route}`. Routes are the matched patterns
//! (`/api/v1/products/{id}/purchase`), never raw paths, so the label values stay few; an
//! unmatched path counts as `unmatched`. The ops endpoints (`/healthz`, `/readyz`,
//! `/metrics`) are left alone: probes and scrapes are not traffic.

use std::time::Instant;

use actix_web::Error;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use tracing::Instrument;
use tracing::field::Empty;

const OPS_ROUTES: &[&str] = &["/healthz", "/readyz", "/metrics"];

/// The middleware; see the module docs.
pub async fn observe(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let route = request
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_owned());
    if OPS_ROUTES.contains(&route.as_str()) {
        return next.call(request).await;
    }
    let method = request.method().as_str().to_owned();
    let span = tracing::info_span!(
        "http_request",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = Empty,
        otel.status_code = Empty,
    );
    if let Some(traceparent) = request
        .headers()
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
    {
        crate::telemetry::adopt_traceparent(&span, traceparent);
    }

    let started = Instant::now();
    let result = next.call(request).instrument(span.clone()).await;
    let status = match &result {
        Ok(response) => response.status().as_u16(),
        Err(error) => error.as_response_error().status_code().as_u16(),
    };
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "ERROR");
    }
    metrics::counter!(
        "seckill_http_requests_total",
        "method" => method.clone(),
        "route" => route.clone(),
        "status" => status.to_string()
    )
    .increment(1);
    metrics::histogram!(
        "seckill_http_request_duration_seconds",
        "method" => method,
        "route" => route
    )
    .record(started.elapsed().as_secs_f64());
    result
}
