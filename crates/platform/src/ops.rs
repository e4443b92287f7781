//! The operator's endpoints every service answers: `/healthz` (the process is alive),
//! `/readyz` (its dependencies answer) and `/metrics` (Prometheus text).

use std::future::Future;
use std::net::TcpListener;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use actix_web::dev::{Server, ServerHandle};
use actix_web::{App, HttpResponse, HttpServer, web};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::json;

type CheckFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// Probes the service's dependencies; `Err` names the one that did not answer.
pub type ReadinessCheck = Arc<dyn Fn() -> CheckFuture + Send + Sync>;

/// Wraps an async closure as a [`ReadinessCheck`].
pub fn readiness<F, Fut>(check: F) -> ReadinessCheck
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    Arc::new(move || Box::pin(check()))
}

/// The process-wide Prometheus recorder. Installed once: several services may share a
/// process in tests, and the `metrics` facade has a single global recorder.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .install_recorder()
                .expect("no other metrics recorder is installed")
        })
        .clone()
}

#[derive(Clone)]
pub struct OpsState {
    pub ready: ReadinessCheck,
    pub metrics: PrometheusHandle,
}

/// Mounts the three endpoints into an actix-web app.
pub fn configure(cfg: &mut web::ServiceConfig, state: OpsState) {
    cfg.app_data(web::Data::new(state))
        .route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz))
        .route("/metrics", web::get().to(render_metrics));
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "alive"}))
}

async fn readyz(state: web::Data<OpsState>) -> HttpResponse {
    match (state.ready)().await {
        Ok(()) => HttpResponse::Ok().json(json!({"status": "ready"})),
        Err(reason) => HttpResponse::ServiceUnavailable().json(json!({
            "error": {"code": "UNAVAILABLE", "message": reason}
        })),
    }
}

async fn render_metrics(state: web::Data<OpsState>) -> HttpResponse {
    state.metrics.run_upkeep();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}

/// A small server with the ops endpoints and whatever `extra` mounts, for the services
/// that serve no public API. Returns the bound port (so tests can ask for port 0) and the
/// running server.
pub fn serve<F>(
    listen: &str,
    state: OpsState,
    extra: F,
) -> std::io::Result<(u16, Server, ServerHandle)>
where
    F: Fn(&mut web::ServiceConfig) + Clone + Send + 'static,
{
    let listener = TcpListener::bind(listen)?;
    let port = listener.local_addr()?.port();
    let server = HttpServer::new(move || {
        App::new()
            .configure(|cfg| configure(cfg, state.clone()))
            .configure(extra.clone())
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run();
    let handle = server.handle();
    Ok((port, server, handle))
}
