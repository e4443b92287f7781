//! Trace context in and out of the process: the W3C `traceparent` a message or an HTTP
//! request carries, and the attributes a span may hold that its log lines must not.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C `traceparent` of the current span, to put into an outgoing message.
pub fn current_traceparent() -> Option<String> {
    traceparent_of(&tracing::Span::current())
}

/// The W3C `traceparent` of `span`.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove("traceparent")
}

fn extract(traceparent: &str) -> opentelemetry::Context {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    TraceContextPropagator::new().extract(&carrier)
}

/// Makes `span` a child of the trace named by an incoming `traceparent`. Call it before the
/// span is first entered: an entered span has started, and its parent is fixed.
pub fn adopt_traceparent(span: &tracing::Span, traceparent: &str) {
    let _ = span.set_parent(extract(traceparent));
}

/// Links `span` to the trace named by `traceparent` (for a batch that serves many traces).
/// Like [`adopt_traceparent`], before the span is first entered.
pub fn link_traceparent(span: &tracing::Span, traceparent: &str) {
    span.add_link(extract(traceparent).span().span_context().clone());
}

/// The trace id (32 hex digits) of `span`, when it has one.
pub fn trace_id_of(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}

/// Sets an OpenTelemetry attribute on `span` that stays out of the log lines: for values
/// (a full order token) a trace may name but a log line must not.
pub fn annotate(span: &tracing::Span, key: &'static str, value: String) {
    span.set_attribute(key, value);
}
