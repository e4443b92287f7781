//! `sale-sim`: runs one simulated sale against a running gateway and prints its report.
//! Exit status: 0 every invariant held, 1 some did not, 2 the sale could not run.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use sale_sim::after_sale::DEFAULT_WEBHOOK_SECRET;
use sale_sim::{AfterSaleConfig, DEFAULT_IDLE_CLOSE, SaleConfig, run_sale};

/// Simulates a flash sale: puts a fresh product on sale, sends a crowd of buyers at it
/// (a purchase token, then one unit each), waits for every order to reach MySQL, and
/// checks that nothing was oversold, lost or left inconsistent.
#[derive(Parser)]
#[command(version)]
struct Cli {
    /// The gateway's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    gateway: String,
    /// Where the gateway serves `/admin`, when not on --gateway (`gateway.ops_listen`).
    #[arg(long)]
    admin_url: Option<String>,
    /// The gateway's admin token.
    #[arg(long, env = "SECKILL_ADMIN__TOKEN", default_value = "dev-admin-token")]
    admin_token: String,
    /// The product to sell; it is replaced. Default: a new id from the clock, so each run
    /// sells a product of its own.
    #[arg(long)]
    product: Option<u64>,
    /// Units on sale.
    #[arg(long, default_value_t = 500)]
    stock: i64,
    #[arg(long, default_value_t = 1)]
    per_user_limit: u32,
    /// Buyers, one unit each.
    #[arg(long, default_value_t = 5000)]
    buyers: u32,
    /// Buyers in flight at once.
    #[arg(long, default_value_t = 200)]
    concurrency: u32,
    /// The first buyer's user id; the others follow.
    #[arg(long, default_value_t = 1)]
    first_user_id: u64,
    /// Seconds after the crowd for MySQL to hold every accepted order.
    #[arg(long, default_value_t = 60)]
    drain_timeout_secs: u64,
    /// Print the report as JSON instead of the summary.
    #[arg(long)]
    json: bool,
    /// No progress bar (there is none anyway when stderr is not a terminal).
    #[arg(long)]
    no_progress: bool,
    /// Every buyer's token first, then the purchases (closed loop at --concurrency): the
    /// purchase rate alone, for benchmarks.
    #[arg(long)]
    tokens_first: bool,
    /// Purchases per second, open loop (implies --tokens-first): latency counts from each
    /// purchase's scheduled moment.
    #[arg(long)]
    rate: Option<f64>,
    /// Milliseconds an idle connection stays open: keep it under the gateway's keep-alive
    /// (`gateway.keep_alive_secs`), or a purchase sent as the gateway closes it is lost.
    #[arg(long, default_value_t = DEFAULT_IDLE_CLOSE.as_millis() as u64)]
    idle_close_ms: u64,
    /// The price of one unit in cents. Default: none sent (the gateway's 0), or 1999 with
    /// --after-sale.
    #[arg(long)]
    price_cents: Option<u64>,
    /// Go on after the click: once the orders are confirmed, the winners pay (signed
    /// callbacks), cancel or walk away; the walked-away orders expire; a second wave buys
    /// the units that came back; and the product's lifecycle counts are checked. Needs a
    /// payment window shorter than --expiry-timeout-secs (orders.payment_window_secs).
    #[arg(long)]
    after_sale: bool,
    /// With --after-sale: the share of the orders paid.
    #[arg(long, default_value_t = 0.7)]
    pay_share: f64,
    /// With --after-sale: the share of the orders cancelled (the rest walk away).
    #[arg(long, default_value_t = 0.15)]
    cancel_share: f64,
    /// With --after-sale: the share of payment callbacks the provider sends twice.
    #[arg(long, default_value_t = 0.1)]
    duplicate_callbacks: f64,
    /// With --after-sale: walked-away orders paid after they expired (each a refund due).
    #[arg(long, default_value_t = 3)]
    late_payments: usize,
    /// With --after-sale: callbacks with a bad signature (each must be refused).
    #[arg(long, default_value_t = 2)]
    forged_callbacks: usize,
    /// With --after-sale: orders followed on their event stream.
    #[arg(long, default_value_t = 20)]
    watch_sample: usize,
    /// With --after-sale: seconds to wait for the walked-away orders to expire.
    #[arg(long, default_value_t = 120)]
    expiry_timeout_secs: u64,
    /// With --after-sale: buyers of the returned units. Default: four per returned unit.
    #[arg(long)]
    second_wave_buyers: Option<u32>,
    /// With --after-sale: seeds who pays, cancels and walks away.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// With --after-sale: the key the payment callbacks are signed with.
    #[arg(
        long,
        env = "SECKILL_PAYMENTS__WEBHOOK_SECRET",
        default_value = DEFAULT_WEBHOOK_SECRET,
        hide_env_values = true
    )]
    webhook_secret: String,
}

/// The sale's price, and the after-sale when asked for; `Err` names a flag that cannot be.
fn after_sale(cli: &Cli) -> Result<(Option<u64>, Option<AfterSaleConfig>), String> {
    if !cli.after_sale {
        return Ok((cli.price_cents, None));
    }
    let after = AfterSaleConfig {
        pay_share: cli.pay_share,
        cancel_share: cli.cancel_share,
        duplicate_share: cli.duplicate_callbacks,
        late_payments: cli.late_payments,
        forged_callbacks: cli.forged_callbacks,
        watch_sample: cli.watch_sample,
        expiry_timeout: Duration::from_secs(cli.expiry_timeout_secs),
        second_wave_buyers: cli.second_wave_buyers,
        seed: cli.seed,
        webhook_secret: cli.webhook_secret.clone(),
    };
    after.validate()?;
    Ok((
        Some(cli.price_cents.unwrap_or(DEMO_PRICE_CENTS)),
        Some(after),
    ))
}

/// A price to pay with --after-sale when none is given: 19.99.
const DEMO_PRICE_CENTS: u64 = 1999;

/// The clock's milliseconds since the epoch: a product id of its own for every run, also for
/// runs started within the same second (seconds would make the second one a restock of the
/// first, whose buyers already hold their limit), and clear of the small ids people type by
/// hand.
fn product_from_clock() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

// One thread: the load tool shares the host with what it measures, and on Tokio's
// multi-thread runtime it spent more CPU per buyer for no higher rate (docs/bench/
// experiments.md: sale-sim on one thread). One core is far more than a sale needs; the
// open loop's schedule keeps a blocking thread of its own.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let (price_cents, after_sale) = match after_sale(&cli) {
        Ok(both) => both,
        Err(error) => {
            eprintln!("sale-sim: {error}");
            return ExitCode::from(2);
        }
    };
    let config = SaleConfig {
        gateway: cli.gateway,
        admin: cli.admin_url,
        admin_token: cli.admin_token,
        product_id: cli.product.unwrap_or_else(product_from_clock),
        stock: cli.stock,
        per_user_limit: cli.per_user_limit,
        buyers: cli.buyers,
        concurrency: cli.concurrency,
        first_user_id: cli.first_user_id,
        drain_timeout: Duration::from_secs(cli.drain_timeout_secs),
        progress: !cli.no_progress,
        tokens_first: cli.tokens_first,
        rate: cli.rate.filter(|rate| *rate > 0.0),
        idle_close: Duration::from_millis(cli.idle_close_ms),
        price_cents,
        after_sale,
    };
    let report = match run_sale(&config).await {
        Ok(report) => report,
        Err(error) => {
            eprintln!(
                "sale-sim: the sale of product {} could not run: {error:#}",
                config.product_id
            );
            return ExitCode::from(2);
        }
    };
    if cli.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(error) => {
                eprintln!("sale-sim: cannot write the report as JSON: {error}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{report}");
    }
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
