use gateway_svc::Application;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let (settings, _telemetry, shutdown) = platform::boot::<gateway_svc::Settings>("gateway-svc");
    #[cfg(feature = "failpoints")]
    let _fail_points = platform::faults::arm();
    let app = Application::build(settings).await?;
    tracing::info!(port = app.port(), "Gateway listening.");
    app.run_until_stopped(shutdown).await
}
