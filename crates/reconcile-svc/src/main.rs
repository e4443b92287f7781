use clap::{Parser, Subcommand};
use domain::{OrderToken, ProductId};
use reconcile_svc::report::Report;
use reconcile_svc::{Application, ManualAction, Policy};

/// Audits Redis flows against MySQL orders and stock, repairs what policy allows, reports.
///
/// Without a command: the daemon, on the configured schedule. With `--once`: one run, the
/// report on the terminal, exit 0 when nothing is left unresolved and 1 otherwise.
#[derive(Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Run once, print the report, and exit.
    #[arg(long)]
    once: bool,
    /// Only this product (default: every product).
    #[arg(long, value_parser = parse_product)]
    product: Option<ProductId>,
    /// What to do with missing orders: republish, restore or report (default from config).
    #[arg(long)]
    policy: Option<Policy>,
    /// Classify and report, change nothing: every repair says what it would do.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Repair one order token by hand, under the reconcile lease; recorded as a run.
    Repair {
        #[arg(long)]
        token: OrderToken,
        /// republish (confirm + send again), release (unit back on sale), or deduct.
        #[arg(long)]
        action: ManualAction,
        /// Say what would be done; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print a recorded run's report (default: the latest).
    Report {
        #[arg(long)]
        run: Option<u64>,
        /// The JSON report instead of the table.
        #[arg(long)]
        json: bool,
    },
}

fn parse_product(raw: &str) -> Result<ProductId, String> {
    raw.parse().map_err(|e| format!("{e}"))
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let (settings, telemetry, shutdown) =
        platform::boot::<reconcile_svc::Settings>("reconcile-svc");
    let dry_run = cli.dry_run || matches!(cli.command, Some(Command::Repair { dry_run: true, .. }));
    let app = Application::build(settings, cli.policy, dry_run).await?;
    let code = match cli.command {
        None if !cli.once => return app.run_daemon(shutdown).await,
        None => match app.auditor.run(app.policy, cli.product).await {
            Ok(report) => {
                print!("{}", report.to_table());
                i32::from(report.unresolved() > 0)
            }
            Err(error) => {
                eprintln!("reconcile-svc: the run did not complete: {error:#}");
                1
            }
        },
        Some(Command::Repair { token, action, .. }) => {
            match app.auditor.repair_token(&token, action).await {
                Ok(finding) => {
                    println!(
                        "{} {} → {}: {}",
                        finding.action.as_str(),
                        token,
                        finding.outcome.as_str(),
                        finding.detail
                    );
                    i32::from(matches!(
                        finding.outcome,
                        reconcile_svc::report::Outcome::Unresolved
                    ))
                }
                Err(error) => {
                    eprintln!("reconcile-svc: {error:#}");
                    1
                }
            }
        }
        Some(Command::Report { run, json }) => {
            let found = match run {
                Some(id) => app.auditor.db.run(id).await,
                None => app.auditor.db.latest_run().await,
            };
            match found {
                Ok(Some(row)) => match row.report.as_deref().map(serde_json::from_str::<Report>) {
                    Some(Ok(report)) if !json => {
                        print!("{}", report.to_table());
                        0
                    }
                    Some(_) if json => {
                        println!("{}", row.report.unwrap_or_default());
                        0
                    }
                    _ => {
                        eprintln!(
                            "run {} ({}) has no readable report",
                            row.id,
                            row.status.as_str()
                        );
                        1
                    }
                },
                Ok(None) => {
                    eprintln!("reconcile-svc: no such run");
                    1
                }
                Err(error) => {
                    eprintln!("reconcile-svc: {error:#}");
                    1
                }
            }
        }
    };
    app.close().await;
    // `exit` runs no destructors: flush the run's spans first.
    telemetry.shutdown();
    std::process::exit(code);
}
