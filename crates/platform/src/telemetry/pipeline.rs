//! The pipeline: one subscriber that writes the log lines and turns the spans of seckill's
//! own crates into OpenTelemetry spans, exported over OTLP/HTTP when an endpoint is set.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use super::SPAN_TARGETS;
use super::log_format::{self, DispatchCell, LogFormat, RegisterDispatch};
use crate::settings::TelemetrySettings;

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
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

pub(super) fn tracer_provider(
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

/// Log lines to `writer` (filtered by `log_filter`) and OpenTelemetry spans from
/// [`SPAN_TARGETS`] to `tracer`; `exporting` says whether that tracer's spans go anywhere.
pub(super) fn subscriber<W>(
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
    let logs = log_format::layer(format, writer, log_filter, &dispatch);
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
    //   alternative), and log lines find their ids through that tree (`log_format::event_ids`).
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

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
}
