//! What every seckill service needs besides its own logic, in one place.
//!
//! - [`settings`]: layered configuration (`config/default.toml` → `config/<env>.toml` →
//!   `SECKILL_<SECTION>__<KEY>`) into each service's own settings type, checked before any
//!   port is bound; the sections several services share.
//! - [`telemetry`]: tracing subscriber (text or JSON lines with trace ids) wired to
//!   OpenTelemetry, exported over OTLP/HTTP when an endpoint is configured.
//! - [`http`]: the actix-web middleware that gives every request a span and its metrics.
//! - [`shutdown`]: SIGTERM/SIGINT into a cancellation token every task can watch.
//! - [`ops`]: `/healthz`, `/readyz` and `/metrics`, for mounting or as a small server.
//! - [`instance`]: a process's holder id for the leases it takes.
//! - [`runtime`]: a side runtime for the work the RocketMQ client hands over on its threads.

pub mod auth;
pub mod faults;
pub mod http;
pub mod instance;
pub mod ops;
pub mod runtime;
pub mod settings;
pub mod shutdown;
pub mod telemetry;

pub use settings::ServiceSettings;

/// Exit code for invalid configuration (EX_CONFIG-like, as sysexits' EX_USAGE): the process
/// stops before binding a port, and the orchestrator shows the reason instead of a crash loop.
pub const EXIT_BAD_CONFIG: i32 = 64;

/// The first lines of every service's `main`: settings (or exit 64 with the reason),
/// logging and tracing, and the shutdown token.
pub fn boot<S: ServiceSettings>(
    service: &'static str,
) -> (S, telemetry::TelemetryGuard, shutdown::Shutdown) {
    let settings: S = match settings::load() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("{service}: invalid configuration: {error}");
            std::process::exit(EXIT_BAD_CONFIG);
        }
    };
    let telemetry = match telemetry::init(service, settings.telemetry()) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("{service}: invalid configuration: {error}");
            std::process::exit(EXIT_BAD_CONFIG);
        }
    };
    (settings, telemetry, shutdown::on_signal())
}
