//! Logs and traces. `tracing` is the one API the code writes to; the subscriber turns spans
//! into log lines (text, or JSON when `log_format = "json"` or `LOG_FORMAT=json`) and into
//! OpenTelemetry spans, so a trace id exists for every request and travels to the consumer
//! in `traceparent`.
//!
//! - **Export.** With an OTLP endpoint (`telemetry.otlp_endpoint`, else
//!   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`) spans go out over
//!   OTLP/HTTP (protobuf) through the SDK's batch processor, which runs on a thread of its
//!   own, sampled as `OTEL_TRACES_SAMPLER` says (default: parent-based, always on).
//!   Without one there is no exporter and no processor at all: spans are sampled out
//!   (`AlwaysOff`), so nothing is recorded or buffered, yet they still carry trace ids — for
//!   the log lines and for the `traceparent` the consumer joins.
//! - **Which spans.** OpenTelemetry sees the INFO spans of seckill's own crates only
//!   ([`SPAN_TARGETS`]), whatever the log filter says: `RUST_LOG=warn` quiets the logs, not
//!   the traces, and the RocketMQ client's own spans stay out of them.
//! - **Log lines** carry `trace_id` (and `span_id`) whenever they are emitted inside a span.
//!   JSON lines put the event's fields first, then `message` — the sentence — then where it
//!   came from (`target`, the span stack).
//! - **No secrets, no full tokens.** Secrets are `SecretString`s (their Debug is redacted);
//!   order tokens are logged in their short form (`OrderToken::short`). The full order
//!   token goes to spans only as an OpenTelemetry attribute ([`annotate`]), never into a
//!   log line.
//!
//! Laid out as [`pipeline`] (the subscriber, the exporter, [`init`]), [`propagation`]
//! (trace context in and out of messages and requests) and `log_format` (the lines).

mod log_format;
pub mod pipeline;
pub mod propagation;

pub use pipeline::{TelemetryError, TelemetryGuard, exporting, init, traces_endpoint};
pub use propagation::{
    adopt_traceparent, annotate, current_traceparent, link_traceparent, trace_id_of, traceparent_of,
};

/// The crates whose spans become OpenTelemetry spans (at INFO and above).
pub const SPAN_TARGETS: &[&str] = &[
    "gateway_svc",
    "order_consumer_svc",
    "reconcile_svc",
    "platform",
    "stock_cache",
    "order_store",
    "order_queue",
];

/// The OpenTelemetry attribute that holds a full order token (never a log field).
pub const ORDER_TOKEN_ATTRIBUTE: &str = "seckill.order_token";

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
    use serde_json::Value;
    use tracing::Subscriber as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::filter::{EnvFilter, LevelFilter};

    use super::log_format::LogFormat;
    use super::pipeline::{subscriber, tracer_provider};
    use super::*;

    /// Log lines written by `emit` under a subscriber of `format` with a non-exporting
    /// provider (as without an OTLP endpoint).
    fn captured(format: LogFormat, emit: impl FnOnce()) -> String {
        captured_with(format, "info", emit)
    }

    /// [`captured`], with `log_filter` as the log filter.
    fn captured_with(format: LogFormat, log_filter: &str, emit: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let provider = tracer_provider("test-svc", None).unwrap();
        let writer = buffer.clone();
        let subscriber = subscriber(
            format,
            move || writer.clone(),
            EnvFilter::new(log_filter),
            provider.tracer("test-svc"),
            false,
        );
        tracing::subscriber::with_default(subscriber, emit);
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn json_lines_put_fields_first_then_the_sentence_and_carry_the_trace_id_inside_a_span() {
        let mut ids = None;
        let text = captured(LogFormat::Json, || {
            tracing::info!(outside = true, "Before any span.");
            let span = tracing::info_span!("purchase", product_id = 7);
            let _entered = span.enter();
            ids = trace_id_of(&span);
            let token = domain::OrderToken::new(
                domain::ProductId(7),
                0x0123_4567_89ab_cdef_0123_4567_89ab_cdef,
            );
            tracing::info!(order = %token.short(), quantity = 2, "Purchase queued.");
        });
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].get("trace_id").is_none(), "{text}");
        let trace_id = ids.expect("a span has a trace id without an exporter");
        assert_eq!(lines[1]["trace_id"], trace_id.as_str());
        assert_eq!(lines[1]["quantity"], 2);
        assert_eq!(lines[1]["message"], "Purchase queued.");
        assert_eq!(lines[1]["spans"][0]["name"], "purchase");
        assert_eq!(lines[1]["spans"][0]["product_id"], 7);
        let line = text.lines().nth(1).unwrap();
        let position = |key: &str| line.find(&format!("\"{key}\"")).unwrap();
        assert!(position("trace_id") < position("order"));
        assert!(position("quantity") < position("message"));
        assert!(!line.contains("0123456789abcdef0123"), "{line}");
    }

    #[test]
    fn text_lines_carry_the_trace_id_inside_a_span() {
        let text = captured(LogFormat::Text { ansi: false }, || {
            let span = tracing::info_span!("consume_batch", size = 3);
            let _entered = span.enter();
            tracing::info!(inserted = 3, "Order batch written.");
        });
        assert!(text.contains(" INFO trace_id="), "{text}");
        assert!(text.contains("consume_batch{size=3}"), "{text}");
        assert!(text.contains("Order batch written. inserted=3"), "{text}");
    }

    #[test]
    fn a_line_carries_the_ids_of_the_innermost_span_even_one_the_log_filter_hides() {
        let mut ids = None;
        let text = captured_with(LogFormat::Json, "warn", || {
            let request = tracing::info_span!("http_request");
            let _request = request.enter();
            let purchase = tracing::info_span!("purchase");
            let _purchase = purchase.enter();
            let span_id = purchase.context().span().span_context().span_id();
            ids = trace_id_of(&purchase).map(|trace| (trace, span_id.to_string()));
            tracing::warn!("Redis cannot be reached.");
        });
        let line: Value = serde_json::from_str(text.trim()).unwrap();
        let (trace_id, span_id) = ids.expect("a span has ids without an exporter");
        assert_eq!(line["trace_id"], trace_id.as_str(), "{text}");
        assert_eq!(line["span_id"], span_id.as_str(), "{text}");
        // The log filter hides the INFO spans from the line itself.
        assert!(line.get("spans").is_none(), "{text}");
    }

    #[test]
    fn the_subscriber_asks_for_no_level_its_filters_disable() {
        // Else every disabled `trace!` of every crate would reach the subscriber to be asked.
        let provider = tracer_provider("test-svc", None).unwrap();
        let subscriber = subscriber(
            LogFormat::Json,
            std::io::sink,
            EnvFilter::new("info"),
            provider.tracer("test-svc"),
            false,
        );
        assert_eq!(subscriber.max_level_hint(), Some(LevelFilter::INFO));
    }

    #[test]
    fn a_traceparent_taken_from_a_span_is_adopted_by_another() {
        let mut seen = (None, None);
        captured(LogFormat::Json, || {
            let sender = tracing::info_span!("send");
            let traceparent = traceparent_of(&sender).expect("a traceparent");
            let receiver = tracing::info_span!("consume");
            adopt_traceparent(&receiver, &traceparent);
            seen = (trace_id_of(&sender), trace_id_of(&receiver));
        });
        assert!(seen.0.is_some());
        assert_eq!(seen.0, seen.1);
    }
}
