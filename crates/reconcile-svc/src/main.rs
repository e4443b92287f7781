use clap::Parser;
use domain::ProductId;
use reconcile_svc::{Application, Policy};

/// Audits Redis flows against MySQL orders and stock, repairs what policy allows, reports.
#[derive(Parser)]
#[command(version)]
struct Cli {
    /// Run once, print the report, exit 0 when nothing is left unresolved, 1 otherwise.
    #[arg(long)]
    once: bool,
    /// Only this product (default: every product).
    #[arg(long, value_parser = reconcile_svc::startup::parse_product)]
    product: Option<ProductId>,
    /// What to do with missing orders: republish, restore or report (default from config).
    #[arg(long)]
    policy: Option<Policy>,
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let (settings, _telemetry, shutdown) = platform::boot("reconcile-svc");
    let app = Application::build(settings, cli.policy).await?;
    if !cli.once {
        return app.run_daemon(shutdown).await;
    }
    let result = app.auditor.run(app.policy, cli.product).await;
    app.close().await;
    match result {
        Ok(report) => {
            print!("{}", report.to_table());
            std::process::exit(if report.unresolved() == 0 { 0 } else { 1 });
        }
        Err(error) => {
            eprintln!("reconcile-svc: the run did not complete: {error:#}");
            std::process::exit(1);
        }
    }
}
