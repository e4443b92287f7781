//! One span and two series per HTTP request, for an actix-web app:
//! - [`observe`], around the whole app
//!   (`App::new().wrap(actix_web::middleware::from_fn(platform::http::observe))`), counts
//!   every request: `seckill_http_requests_total{method,route,status}` and
//!   `seckill_http_request_duration_seconds{method,route}`;
//! - [`traced`], around each route's resource (`web::resource(path).wrap_fn(…)`), opens
//!   the request's span, `http_request`, exported as `"<METHOD> <route>"`, kind server: the
//!   root of a purchase's trace — or a child of the caller's, when the request brings a W3C
//!   `traceparent`. An answer given outside a route (a 404, a refusal before routing) makes
//!   its span with [`request_span`].
//!
//! Routes are the matched patterns (`/api/v1/products/{id}/purchase`), never raw paths, so
//! the label values stay few; an unmatched path counts as `unmatched`. The ops endpoints
//! (`/healthz`, `/readyz`, `/metrics`) are left alone: probes and scrapes are not traffic.
//!
//! **Cost.** This runs on every request, the crowd's refusals included, so it does no work
//! the router does anyway and makes no span no one can see:
//! - No route matching of its own. [`traced`] is given its route when the route is
//!   mounted; [`observe`] reads the route *after* the answer, from the request the response
//!   carries: once actix-web's router has dispatched a request, `HttpRequest::match_pattern`
//!   looks the pattern up by the resource's index. Asking before the handler, as this did,
//!   walked the route table with actix-router's regex matcher (a tenth of the gateway's CPU
//!   on its refusal path), and then the router matched again. Only a request no resource
//!   took (a 404, a refusal before routing) is matched again, as before.
//! - Without an exporter ([`crate::telemetry::exporting`]) a span carries only the method
//!   and the route, which is what a log line written inside it shows; the `otel.*` fields
//!   and the status are for the exported span. And a route may name requests that need no
//!   span then ([`traced`]'s `quiet`): a span was an eighth of the CPU of a refusal after
//!   sell-out.
//! - The two series' handles are kept per worker thread (see [`Series`]), so a request
//!   costs two atomic increments, not two registry look-ups with owned label strings.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::time::Instant;

use actix_web::Error;
use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::http::header::HeaderMap;
use actix_web::middleware::Next;
use metrics::{Counter, Histogram};
use tracing::field::Empty;
use tracing::{Instrument, Span};

const OPS_ROUTES: &[&str] = &["/healthz", "/readyz", "/metrics"];

/// The series of every request but the ops endpoints'; see the module docs.
pub async fn observe(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    // The ops endpoints are static paths: compared, not matched.
    if OPS_ROUTES.contains(&request.path()) {
        return next.call(request).await;
    }
    let method = request.method().clone();
    let started = Instant::now();
    let result = next.call(request).await;
    let (status, route) = match &result {
        Ok(response) => (
            response.status().as_u16(),
            response.request().match_pattern(),
        ),
        // Only a middleware's error (the handlers' errors are responses by now): the
        // request is gone with it, and so is its route.
        Err(error) => (error.as_response_error().status_code().as_u16(), None),
    };
    let route = route.as_deref().unwrap_or("unmatched");
    Series::with(&method, route, status, |counter, histogram| {
        counter.increment(1);
        histogram.record(started.elapsed().as_secs_f64());
    });
    result
}

/// The span of a request to `route`, around `service` (the route's resource), for
/// `web::resource(route).wrap_fn(move |request, service| traced(route, quiet, request,
/// service))`. `quiet`, when given, names requests that need no span while spans are not
/// exported: ones whose answer logs nothing and sends nothing on (a refusal from a local
/// flag, say). Wherever it is not sure, it must say no.
pub fn traced<S, B>(
    route: &'static str,
    quiet: Option<fn(&ServiceRequest) -> bool>,
    request: ServiceRequest,
    service: &S,
) -> impl Future<Output = Result<ServiceResponse<B>, Error>> + use<S, B>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
{
    let exporting = crate::telemetry::exporting();
    let span = if !exporting && quiet.is_some_and(|quiet| quiet(&request)) {
        Span::none()
    } else {
        request_span(request.method(), route, request.headers())
    };
    let call = service.call(request);
    async move {
        // Pinned here rather than given a clone of the span: the span is read back from it.
        let mut call = std::pin::pin!(call.instrument(span));
        let result = call.as_mut().await;
        if exporting {
            let status = match &result {
                Ok(response) => response.status(),
                Err(error) => error.as_response_error().status_code(),
            };
            record_status(call.span(), status.as_u16());
        }
        result
    }
}

/// A request's `http_request` span (see the module docs), a child of the trace its
/// `traceparent` header names, if any.
pub fn request_span(method: &Method, route: &str, headers: &HeaderMap) -> Span {
    let span = if crate::telemetry::exporting() {
        tracing::info_span!(
            "http_request",
            otel.name = %format_args!("{method} {route}"),
            otel.kind = "server",
            http.request.method = %method,
            http.route = %route,
            http.response.status_code = Empty,
            otel.status_code = Empty,
        )
    } else {
        // Nothing is exported: only what a log line written inside the span shows.
        tracing::info_span!("http_request", http.request.method = %method, http.route = %route)
    };
    if let Some(traceparent) = headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
    {
        crate::telemetry::adopt_traceparent(&span, traceparent);
    }
    span
}

/// Records the answer's status on a [`request_span`] (for the exported span: nothing logs
/// inside a request's span once it is answered).
pub fn record_status(span: &Span, status: u16) {
    if crate::telemetry::exporting() {
        span.record("http.response.status_code", status);
        if status >= 500 {
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// The handles of one route's series on this thread: the duration histogram per method,
/// the counter per (method, status). Registering a series (what `metrics::counter!` does
/// on every call) hashes its name and labels and takes a lock of the recorder's registry;
/// a handle is the registered series itself. The label sets are few (routes × methods ×
/// statuses), so the map stays small. A handle stays valid as long as the recorder keeps
/// the series: `platform::ops` sets no idle timeout, so it keeps them all. (The recorder
/// must be installed before the first request: a handle taken earlier counts nowhere.)
#[derive(Default)]
struct Series {
    by_method: Vec<MethodSeries>,
}

/// A method's duration histogram and its counters by status.
type MethodSeries = (Method, Histogram, Vec<(u16, Counter)>);

thread_local! {
    static SERIES: RefCell<HashMap<String, Series>> = RefCell::new(HashMap::new());
}

impl Series {
    fn with(method: &Method, route: &str, status: u16, f: impl FnOnce(&Counter, &Histogram)) {
        SERIES.with(|series| {
            let mut series = series.borrow_mut();
            if !series.contains_key(route) {
                series.insert(route.to_owned(), Series::default());
            }
            let of_route = series.get_mut(route).expect("inserted above");
            let position = match of_route.by_method.iter().position(|(m, ..)| m == method) {
                Some(position) => position,
                None => {
                    let histogram = metrics::histogram!(
                        "seckill_http_request_duration_seconds",
                        "method" => method.as_str().to_owned(),
                        "route" => route.to_owned()
                    );
                    of_route
                        .by_method
                        .push((method.clone(), histogram, Vec::new()));
                    of_route.by_method.len() - 1
                }
            };
            let (_, histogram, counters) = &mut of_route.by_method[position];
            let counter = match counters.iter().position(|(s, _)| *s == status) {
                Some(position) => &counters[position].1,
                None => {
                    let counter = metrics::counter!(
                        "seckill_http_requests_total",
                        "method" => method.as_str().to_owned(),
                        "route" => route.to_owned(),
                        "status" => status.to_string()
                    );
                    counters.push((status, counter));
                    &counters[counters.len() - 1].1
                }
            };
            f(counter, histogram);
        });
    }
}
