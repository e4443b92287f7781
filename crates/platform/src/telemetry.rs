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

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use serde_json::{Map, Value};
use tracing::dispatcher::WeakDispatch;
use tracing::field::{Field, Visit};
use tracing::{Dispatch, Event, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormattedFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

use crate::settings::TelemetrySettings;

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

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("the OTLP exporter cannot be built for {endpoint}: {source}")]
    Exporter {
        endpoint: String,
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// Keeps the tracer provider alive; dropping it (or [`TelemetryGuard::shutdown`]) flushes
/// the spans still buffered to the exporter.
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    /// Where spans go, if anywhere: for the start-up log line and the tests.
    pub endpoint: Option<String>,
}

impl std::fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryGuard")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl TelemetryGuard {
    /// Flushes and stops the exporter now: for the paths that leave with
    /// `std::process::exit`, which runs no destructors.
    pub fn shutdown(mut self) {
        self.flush_and_stop();
    }

    fn flush_and_stop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // Exporting happens on the batch processor's own thread; this waits for it
            // (bounded by the exporter's timeout when the collector does not answer).
            let _ = provider.shutdown();
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        self.flush_and_stop();
    }
}

/// The OTLP/HTTP traces URL, if spans are to be exported. `setting` (the config file or
/// `SECKILL_TELEMETRY__OTLP_ENDPOINT`) wins over the standard variables; like
/// `OTEL_EXPORTER_OTLP_ENDPOINT` it is the collector's base URL (`http://collector:4318`),
/// to which `/v1/traces` is added. `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is used as it is.
/// `OTEL_SDK_DISABLED=true` turns export off whatever else is set.
pub fn traces_endpoint(setting: &str, env: impl Fn(&str) -> Option<String>) -> Option<String> {
    let non_empty = |value: Option<String>| value.filter(|v| !v.trim().is_empty());
    if non_empty(env("OTEL_SDK_DISABLED")).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return None;
    }
    let with_path = |base: &str| {
        let base = base.trim().trim_end_matches('/');
        if base.ends_with("/v1/traces") {
            base.to_owned()
        } else {
            format!("{base}/v1/traces")
        }
    };
    if !setting.trim().is_empty() {
        return Some(with_path(setting));
    }
    if let Some(endpoint) = non_empty(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
        return Some(endpoint.trim().to_owned());
    }
    non_empty(env("OTEL_EXPORTER_OTLP_ENDPOINT")).map(|base| with_path(&base))
}

fn tracer_provider(
    service: &'static str,
    endpoint: Option<&str>,
) -> Result<SdkTracerProvider, TelemetryError> {
    let builder = SdkTracerProvider::builder()
        .with_resource(Resource::builder().with_service_name(service).build());
    let builder = match endpoint {
        Some(endpoint) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(endpoint)
                .build()
                .map_err(|source| TelemetryError::Exporter {
                    endpoint: endpoint.to_owned(),
                    source,
                })?;
            // The SDK's default sampler: ParentBased(AlwaysOn), so a purchase sampled at the
            // gateway is sampled in the consumer too; OTEL_TRACES_SAMPLER(_ARG) change it —
            // with a real crowd, e.g. `parentbased_traceidratio` and `0.01`. The batch
            // processor's delay and queue follow OTEL_BSP_* (a full queue drops spans).
            builder.with_batch_exporter(exporter)
        }
        // Nothing recorded, nothing buffered; span contexts (trace ids) still exist.
        None => builder.with_sampler(Sampler::AlwaysOff),
    };
    Ok(builder.build())
}

/// Whether the installed subscriber exports spans (an OTLP endpoint was configured).
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans go anywhere: false without an OTLP endpoint (every span is sampled out, so
/// an attribute recorded on one is work for nothing) and before [`init`]. For the
/// per-request code, which then leaves out what only an exported span shows
/// ([`crate::http`]).
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Installs the global subscriber. Call once, first thing in `main` (see [`crate::boot`]).
/// Errs only when an OTLP endpoint is set and its exporter cannot be built.
pub fn init(
    service: &'static str,
    settings: &TelemetrySettings,
) -> Result<TelemetryGuard, TelemetryError> {
    let endpoint = traces_endpoint(&settings.otlp_endpoint, |name| std::env::var(name).ok());
    let provider = tracer_provider(service, endpoint.as_deref())?;
    let tracer = provider.tracer(service);
    opentelemetry::global::set_tracer_provider(provider.clone());

    let log_filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.log_filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("LOG_FORMAT")
        .map(|f| f.eq_ignore_ascii_case("json"))
        .unwrap_or(settings.log_format == "json");
    let format = if json {
        LogFormat::Json
    } else {
        LogFormat::Text {
            ansi: std::io::stdout().is_terminal(),
        }
    };
    let exporting = endpoint.is_some();
    let result = subscriber(format, std::io::stdout, log_filter, tracer, exporting).try_init();
    match result {
        // Only the subscriber installed says whether spans are exported.
        Ok(()) => EXPORTING.store(exporting, Ordering::Relaxed),
        // A test process may start several services; the first subscriber wins.
        Err(error) => tracing::debug!(%error, "Tracing subscriber already installed."),
    }
    match &endpoint {
        Some(endpoint) => tracing::info!(%endpoint, "Exporting traces over OTLP/HTTP."),
        None => tracing::debug!("No OTLP endpoint: traces are not exported."),
    }
    Ok(TelemetryGuard {
        provider: Some(provider),
        endpoint,
    })
}

#[derive(Debug, Clone, Copy)]
enum LogFormat {
    Text { ansi: bool },
    Json,
}

/// Log lines to `writer` (filtered by `log_filter`) and OpenTelemetry spans from
/// [`SPAN_TARGETS`] to `tracer`; `exporting` says whether that tracer's spans go anywhere.
fn subscriber<W>(
    format: LogFormat,
    writer: W,
    log_filter: EnvFilter,
    tracer: opentelemetry_sdk::trace::Tracer,
    exporting: bool,
) -> impl Subscriber + Send + Sync + for<'a> LookupSpan<'a>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let dispatch = DispatchCell::default();
    let logs: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .fmt_fields(JsonFields::new())
            .event_format(JsonLine {
                dispatch: dispatch.clone(),
            })
            .with_filter(log_filter)
            .boxed(),
        LogFormat::Text { ansi } => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(ansi)
            .event_format(TextLine {
                inner: format::Format::default()
                    .without_time()
                    .with_level(false)
                    .with_ansi(ansi),
                dispatch: dispatch.clone(),
            })
            .with_filter(log_filter)
            .boxed(),
    };
    let span_filter = Targets::new().with_targets(
        SPAN_TARGETS
            .iter()
            .map(|target| (*target, LevelFilter::INFO)),
    );
    // Without an exporter every span is sampled out, and per-request spans are a real part
    // of a request's cost, so the layer does only what the ids need:
    // - not the extra attributes it adds by default (source location, thread id and name —
    //   an allocation per span — target, and the busy/idle timings, two clock reads per
    //   poll of an instrumented future): computed for every request, never seen;
    // - no context activation: entering a span (on every poll of an instrumented future,
    //   and once more to drop it) would clone its OpenTelemetry context onto a thread-local
    //   stack. Parents come from the tracing span tree instead (the layer's documented
    //   alternative), and log lines find their ids through that tree ([`event_ids`]).
    // With an exporter all of it stays as the SDK's defaults have it.
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(exporting)
        .with_threads(exporting)
        .with_target(exporting)
        .with_tracked_inactivity(exporting)
        .with_context_activation(exporting)
        .with_filter(span_filter);
    tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        // Filtered to nothing: it only needs to be told the dispatcher. A layer without a
        // filter of its own would count as one that wants every level, and every disabled
        // `trace!` of every crate (actix-http's, many per request) would then reach the
        // subscriber to be asked about.
        .with(RegisterDispatch(dispatch).with_filter(LevelFilter::OFF))
}

/// The subscriber the log formatters run in, for [`event_ids`]: a formatter is given the
/// spans its own filter lets through, not the whole tree, nor the OpenTelemetry layer.
#[derive(Clone, Default)]
struct DispatchCell(Arc<OnceLock<WeakDispatch>>);

/// Fills a [`DispatchCell`] when the subscriber is made into a dispatcher (weakly: the
/// dispatcher owns the formatters).
struct RegisterDispatch(DispatchCell);

impl<S: Subscriber> Layer<S> for RegisterDispatch {
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        let _ = self.0.0.set(subscriber.downgrade());
    }
}

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

/// The trace and span ids of the span `event` was emitted in: the innermost span around it
/// (its explicit parent, else the current one) that has an OpenTelemetry context, whatever
/// the log filter lets through — spans of other crates have none. Read from the span tree,
/// not from the thread's active OpenTelemetry context, which exists only while an exporter
/// is configured (see [`subscriber`]).
fn event_ids(
    dispatch: &DispatchCell,
    current: Option<&tracing::span::Id>,
    event: &Event<'_>,
) -> Option<(String, String)> {
    let leaf = match event.parent() {
        Some(parent) => parent,
        None if event.is_contextual() => current?,
        None => return None,
    };
    let dispatch = dispatch.0.get()?.upgrade()?;
    let registry = dispatch.downcast_ref::<Registry>()?;
    registry.span(leaf)?.scope().find_map(|span| {
        let context = tracing_opentelemetry::get_otel_context(&span.id(), &dispatch)?;
        let otel_span = context.span();
        let span_context = otel_span.span_context();
        span_context.is_valid().then(|| {
            (
                span_context.trace_id().to_string(),
                span_context.span_id().to_string(),
            )
        })
    })
}

/// Text lines: time, level, `trace_id=…` inside a span, then tracing's usual
/// `span{fields}: target: message fields`.
struct TextLine {
    inner: format::Format<format::Full, ()>,
    dispatch: DispatchCell,
}

impl<S, N> FormatEvent<S, N> for TextLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ");
        write!(writer, "{now} {:>5} ", event.metadata().level())?;
        if let Some((trace_id, _)) = event_ids(&self.dispatch, ctx.current_span().id(), event) {
            write!(writer, "trace_id={trace_id} ")?;
        }
        self.inner.format_event(ctx, writer, event)
    }
}

/// JSON lines: `timestamp`, `level`, `trace_id`/`span_id` (inside a span), the event's
/// fields, `message`, `target`, then `spans` (root first, each with its fields).
struct JsonLine {
    dispatch: DispatchCell,
}

impl<S> FormatEvent<S, JsonFields> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = JsonObject::default();
        line.entry(
            "timestamp",
            &Value::String(
                chrono::Utc::now()
                    .format("%Y-%m-%dT%H:%M:%S%.6fZ")
                    .to_string(),
            ),
        );
        line.entry("level", &Value::String(meta.level().to_string()));
        if let Some((trace_id, span_id)) = event_ids(&self.dispatch, ctx.current_span().id(), event)
        {
            line.entry("trace_id", &Value::String(trace_id));
            line.entry("span_id", &Value::String(span_id));
        }
        let mut fields = FieldVisitor::default();
        event.record(&mut fields);
        for (name, value) in &fields.fields {
            line.entry(name, value);
        }
        line.entry(
            "message",
            &Value::String(fields.message.unwrap_or_default()),
        );
        line.entry("target", &Value::String(meta.target().to_owned()));
        if let Some(scope) = ctx.event_scope() {
            let spans: Vec<Value> = scope
                .from_root()
                .map(|span| {
                    let mut object = Map::new();
                    object.insert("name".into(), Value::String(span.name().to_owned()));
                    let extensions = span.extensions();
                    if let Some(recorded) = extensions.get::<FormattedFields<JsonFields>>()
                        && let Ok(Value::Object(recorded)) =
                            serde_json::from_str::<Value>(&recorded.fields)
                    {
                        object.extend(recorded);
                    }
                    Value::Object(object)
                })
                .collect();
            if !spans.is_empty() {
                line.entry("spans", &Value::Array(spans));
            }
        }
        writeln!(writer, "{}", line.finish())
    }
}

/// A JSON object written key by key, so the keys keep the order they are given in.
#[derive(Default)]
struct JsonObject {
    text: String,
}

impl JsonObject {
    fn entry(&mut self, key: &str, value: &Value) {
        self.text.push(if self.text.is_empty() { '{' } else { ',' });
        let key = serde_json::to_string(key).unwrap_or_else(|_| "\"?\"".into());
        let value = serde_json::to_string(value).unwrap_or_else(|_| "null".into());
        let _ = write!(self.text, "{key}:{value}");
    }

    fn finish(mut self) -> String {
        if self.text.is_empty() {
            self.text.push('{');
        }
        self.text.push('}');
        self.text
    }
}

#[derive(Default)]
struct FieldVisitor {
    fields: Vec<(String, Value)>,
    message: Option<String>,
}

impl FieldVisitor {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            self.message = Some(match value {
                Value::String(text) => text,
                other => other.to_string(),
            });
        } else {
            self.fields.push((field.name().to_owned(), value));
        }
    }
}

impl Visit for FieldVisitor {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(
            field,
            serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number),
        );
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        // The whole cause chain, as `{:#}` of anyhow would print it.
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(cause) = source {
            let _ = write!(text, ": {cause}");
            source = cause.source();
        }
        self.put(field, Value::String(text));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn no_endpoint_anywhere_means_no_export() {
        assert_eq!(traces_endpoint("", env(&[])), None);
        assert_eq!(
            traces_endpoint(" ", env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")])),
            None
        );
    }

    #[test]
    fn the_setting_is_a_base_url_and_wins_over_the_standard_variables() {
        let standard = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4318")]);
        assert_eq!(
            traces_endpoint("http://collector:4318/", standard).as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert_eq!(
            traces_endpoint("http://collector:4318/v1/traces", env(&[])).as_deref(),
            Some("http://collector:4318/v1/traces")
        );
    }

    #[test]
    fn the_standard_variables_follow_the_otlp_specification() {
        let base = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]);
        assert_eq!(
            traces_endpoint("", base).as_deref(),
            Some("http://c:4318/v1/traces")
        );
        let signal = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9999/custom"),
        ]);
        assert_eq!(
            traces_endpoint("", signal).as_deref(),
            Some("http://t:9999/custom")
        );
    }

    #[test]
    fn otel_sdk_disabled_turns_export_off() {
        let disabled = env(&[("OTEL_SDK_DISABLED", "TRUE")]);
        assert_eq!(traces_endpoint("http://collector:4318", disabled), None);
    }

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

    #[test]
    fn a_json_object_keeps_its_keys_in_the_order_given() {
        let mut object = JsonObject::default();
        object.entry("b", &Value::from(1));
        object.entry("a", &Value::from("x\"y"));
        assert_eq!(object.finish(), r#"{"b":1,"a":"x\"y"}"#);
        assert_eq!(JsonObject::default().finish(), "{}");
    }
}
