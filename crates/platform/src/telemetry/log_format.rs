//! The two forms of a log line: text for a terminal, JSON lines for a log pipeline. Both
//! carry the ids of the trace the line was written in.
//!
//! The JSON line is written here rather than by `tracing-subscriber`'s JSON format: that
//! format writes only what was recorded on the event and its spans, and has no place for
//! fields from elsewhere. The trace and span ids live in the OpenTelemetry context, not in
//! any tracing field, and the documented line (docs/operations.md) carries them at the top
//! level, where log pipelines join a service's lines with another's. Its `JsonFields` still
//! records the spans' fields.

use std::fmt::{self, Write as _};
use std::sync::{Arc, OnceLock};

use opentelemetry::trace::TraceContextExt;
use serde_json::{Map, Value};
use tracing::dispatcher::WeakDispatch;
use tracing::field::{Field, Visit};
use tracing::{Dispatch, Event, Subscriber};
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};

#[derive(Debug, Clone, Copy)]
pub(super) enum LogFormat {
    Text { ansi: bool },
    Json,
}

/// The layer that writes log lines in `format` to `writer`, as `log_filter` lets through;
/// `dispatch` is filled once the subscriber exists (see [`RegisterDispatch`]).
pub(super) fn layer<W>(
    format: LogFormat,
    writer: W,
    log_filter: EnvFilter,
    dispatch: &DispatchCell,
) -> Box<dyn Layer<Registry> + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    match format {
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
    }
}

/// The subscriber the log formatters run in, for [`event_ids`]: a formatter is given the
/// spans its own filter lets through, not the whole tree, nor the OpenTelemetry layer.
#[derive(Clone, Default)]
pub(super) struct DispatchCell(Arc<OnceLock<WeakDispatch>>);

/// Fills a [`DispatchCell`] when the subscriber is made into a dispatcher (weakly: the
/// dispatcher owns the formatters).
pub(super) struct RegisterDispatch(pub(super) DispatchCell);

impl<S: Subscriber> Layer<S> for RegisterDispatch {
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        let _ = self.0.0.set(subscriber.downgrade());
    }
}

/// The trace and span ids of the span `event` was emitted in: the innermost span around it
/// (its explicit parent, else the current one) that has an OpenTelemetry context, whatever
/// the log filter lets through — spans of other crates have none. Read from the span tree,
/// not from the thread's active OpenTelemetry context, which exists only while an exporter
/// is configured (see `pipeline::subscriber`).
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

    #[test]
    fn a_json_object_keeps_its_keys_in_the_order_given() {
        let mut object = JsonObject::default();
        object.entry("b", &Value::from(1));
        object.entry("a", &Value::from("x\"y"));
        assert_eq!(object.finish(), r#"{"b":1,"a":"x\"y"}"#);
        assert_eq!(JsonObject::default().finish(), "{}");
    }
}
