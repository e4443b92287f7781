//! Logs and traces. `tracing` is the one API the code writes to; the subscriber turns spans
//! into log lines (text, or JSON when `log_format = "json"`) and into OpenTelemetry spans,
//! so a trace id exists for every request and travels to the consumer in `traceparent`.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::settings::TelemetrySettings;

/// Keeps the tracer provider alive; dropping it flushes what is buffered.
pub struct TelemetryGuard {
    provider: SdkTracerProvider,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// Installs the global subscriber. Call once, first thing in `main`.
pub fn init(service: &'static str, settings: &TelemetrySettings) -> TelemetryGuard {
    let provider = SdkTracerProvider::builder()
        .with_resource(Resource::builder().with_service_name(service).build())
        .build();
    let tracer = provider.tracer(service);
    opentelemetry::global::set_tracer_provider(provider.clone());

    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.log_filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let otel = tracing_opentelemetry::layer().with_tracer(tracer);
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    let json = std::env::var("LOG_FORMAT")
        .map(|f| f == "json")
        .unwrap_or(settings.log_format == "json");
    let result = if json {
        registry
            .with(tracing_subscriber::fmt::layer().json().flatten_event(true))
            .try_init()
    } else {
        registry.with(tracing_subscriber::fmt::layer()).try_init()
    };
    if let Err(error) = result {
        // A test process may start several services; the first subscriber wins.
        tracing::debug!(%error, "Tracing subscriber already installed.");
    }
    TelemetryGuard { provider }
}

/// The W3C `traceparent` of the current span, to put into an outgoing message.
pub fn current_traceparent() -> Option<String> {
    let context = tracing::Span::current().context();
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove("traceparent")
}

/// Makes `span` a child of the trace named by an incoming `traceparent`.
pub fn adopt_traceparent(span: &tracing::Span, traceparent: &str) {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let parent = TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(parent);
}
