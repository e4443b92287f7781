// Proving Send for the RocketMQ client's types (push consumer, producer) nests deeper
// than the default limit of 128 once the order batcher's task holds a publisher.
#![recursion_limit = "256"]

use gateway_svc::Application;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let (settings, _telemetry, shutdown) = platform::boot("gateway-svc");
    #[cfg(feature = "failpoints")]
    let _fail_points = platform::faults::arm();
    let app = Application::build(settings).await?;
    tracing::info!(port = app.port(), "Gateway listening.");
    app.run_until_stopped(shutdown).await
}
