use order_consumer_svc::Application;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let (settings, _telemetry, shutdown) =
        platform::boot::<order_consumer_svc::Settings>("order-consumer-svc");
    #[cfg(feature = "failpoints")]
    let _fail_points = platform::faults::arm();
    let app = Application::build(settings).await?;
    tracing::info!(port = app.port(), "Order consumer running.");
    app.run_until_stopped(shutdown).await
}
