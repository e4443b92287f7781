//! sale-sim: a simulated flash sale against a running gateway, and the check that it kept
//! its promises. [`run_sale`] puts a fresh product on sale, sends a crowd of buyers at it
//! (each: a purchase token, then one unit), waits until MySQL holds every accepted order,
//! asks a sample of buyers for their order's status, and returns a [`SaleReport`] whose
//! `violations` list every invariant the sale broke (oversold, undersold, orders missing,
//! stock that disagrees between Redis and MySQL, server errors). `make demo`, `make bench`
//! and the end-to-end test all run a sale through it; the `sale-sim` binary prints the
//! report for a person (or as JSON) and exits 0, 1 (violations) or 2 (could not run).
//!
//!
//! With [`SaleConfig::after_sale`] set, the sale goes on after the click
//! ([`after_sale`]): the winners pay, cancel or walk away, the payment provider calls back
//! (signed, sometimes twice, sometimes too late, sometimes forged), the walked-away orders
//! expire, a second wave buys the units that came back, and the report's `after_sale`
//! holds the lifecycle's counts and adds its invariants to `violations`.
//!
//! - `gateway`: the HTTP calls, typed, with refusals reduced to their error code.
//! - `crowd`: the buyers, at most `concurrency` in flight, and the drain watch.
//! - [`after_sale`]: the story after the click.
//! - [`report`]: the report, its invariants and the human summary.

pub mod after_sale;
mod crowd;
pub mod gateway;
pub mod report;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use rand::seq::IndexedRandom;
use tokio::task::JoinSet;

pub use after_sale::{AfterSaleConfig, AfterSaleReport};
pub use report::{Percentiles, SaleReport, SampleCheck, percentile};

use crate::crowd::{DrainWatch, Tally};
use crate::gateway::{Gateway, ProductState, Refusal};

/// How many accepted orders are asked for by their buyer after the drain.
const SAMPLE_SIZE: usize = 20;
/// How often the product's order count is read while waiting for the drain.
const DRAIN_POLL: Duration = Duration::from_millis(100);
/// How long the load tool keeps an idle connection by default: under the gateway's default
/// keep-alive of 5 s (`gateway.keep_alive_secs`), so the gateway never closes one under it.
pub const DEFAULT_IDLE_CLOSE: Duration = Duration::from_secs(4);
/// How long a sampled order may still read "queued" once MySQL holds it: the consumer
/// marks orders confirmed in Redis just after its MySQL commit.
const CONFIRM_GRACE: Duration = Duration::from_secs(3);

/// One simulated sale.
#[derive(Debug, Clone)]
pub struct SaleConfig {
    /// The gateway's base URL.
    pub gateway: String,
    /// The gateway's ops URL, when it serves `/admin` apart (`gateway.ops_listen`); `None`:
    /// `/admin` is on `gateway`.
    pub admin: Option<String>,
    pub admin_token: String,
    /// Replaced (`force`) by the sale: use a product nothing else relies on.
    pub product_id: u64,
    pub stock: i64,
    pub per_user_limit: u32,
    /// User ids `first_user_id .. first_user_id + buyers`, one unit each.
    pub buyers: u32,
    /// Buyers in flight at once.
    pub concurrency: u32,
    pub first_user_id: u64,
    /// How long after the crowd MySQL may take to hold every accepted order.
    pub drain_timeout: Duration,
    /// A progress bar on stderr (drawn only when stderr is a terminal).
    pub progress: bool,
    /// Every buyer's token first, then the purchases: the purchase rate and latency alone,
    /// without token requests in between (for benchmarks; a real crowd interleaves them).
    pub tokens_first: bool,
    /// Purchases per second, open loop (implies `tokens_first`): each purchase goes out at
    /// its scheduled moment and its latency counts from there. `None`: closed loop.
    pub rate: Option<f64>,
    /// An idle pooled connection is closed after this long: keep it under the gateway's
    /// keep-alive, or a purchase sent just as the gateway closes its connection is lost.
    pub idle_close: Duration,
    /// The price of one unit, in cents; `None` leaves it out of the product (the gateway's
    /// default, 0).
    pub price_cents: Option<u64>,
    /// What the winners do after the sale; `None`: the sale ends when its orders are in
    /// MySQL, as it always did.
    pub after_sale: Option<AfterSaleConfig>,
}

impl SaleConfig {
    /// The demo's sale (5,000 buyers for 500 units, 200 in flight) of `product_id`, against
    /// the local gateway; change the fields that matter to you.
    pub fn new(product_id: u64) -> Self {
        Self {
            gateway: "http://127.0.0.1:8080".to_owned(),
            admin: None,
            admin_token: "dev-admin-token".to_owned(),
            product_id,
            stock: 500,
            per_user_limit: 1,
            buyers: 5000,
            concurrency: 200,
            first_user_id: 1,
            drain_timeout: Duration::from_secs(60),
            progress: false,
            tokens_first: false,
            rate: None,
            idle_close: DEFAULT_IDLE_CLOSE,
            price_cents: None,
            after_sale: None,
        }
    }
}

/// Runs the sale and checks it. `Err` means the sale could not run or could not be read
/// back (gateway unreachable, product refused); a sale that ran but broke an invariant is
/// `Ok` with its `violations` filled in.
///
/// ```no_run
/// # async fn sale() -> anyhow::Result<()> {
/// let config = sale_sim::SaleConfig {
///     buyers: 2000,
///     stock: 100,
///     ..sale_sim::SaleConfig::new(900_001)
/// };
/// let report = sale_sim::run_sale(&config).await?;
/// assert!(report.violations.is_empty(), "{report}");
/// # Ok(())
/// # }
/// ```
pub async fn run_sale(config: &SaleConfig) -> anyhow::Result<SaleReport> {
    let concurrency = config.concurrency.max(1);
    let gateway = Gateway::new(&config.gateway, &config.admin_token, config.idle_close)
        .context("cannot build the HTTP client")?
        .with_admin_base(config.admin.as_deref());
    let product = config.product_id;

    gateway
        .put_product(
            product,
            config.stock,
            config.per_user_limit,
            config.price_cents,
        )
        .await
        .map_err(|refusal| describe(&gateway, "put the product on sale", &refusal))?;

    let progress = progress_bar(config);
    let watch = Arc::new(Mutex::new(DrainWatch::new(Instant::now())));
    // Orders may all land while the crowd is still being turned away; watching during the
    // crowd too is what makes the drain time mean "the last order reached MySQL".
    let watcher = tokio::spawn(crowd::watch_orders(
        gateway.clone(),
        product,
        Arc::clone(&watch),
        DRAIN_POLL,
    ));
    let crowd = if config.tokens_first || config.rate.is_some() {
        crowd::run_tokens_first(&gateway, config, concurrency, config.rate, &progress).await
    } else {
        crowd::run(&gateway, config, concurrency, &progress).await
    };
    watcher.abort();
    progress.finish_and_clear();
    let crowd = crowd?;
    let tally = Tally::of(&crowd.buyers);

    let (state, drained_at) = wait_for_drain(&gateway, config, tally.accepted, &watch).await?;
    let first_purchase = tally.first_purchase.unwrap_or(crowd.started);
    let drain_seconds = drained_at.map(|at| at.saturating_duration_since(first_purchase));
    let sell_seconds = drained_at.map(|at| at.saturating_duration_since(crowd.started));
    let purchase_seconds = tally
        .first_purchase
        .zip(tally.last_answer)
        .map(|(first, last)| last.saturating_duration_since(first).as_secs_f64());

    let accepted: Vec<(u64, &str)> = crowd
        .buyers
        .iter()
        .filter_map(|b| b.order_token().map(|token| (b.user, token)))
        .collect();
    let sample = accepted.choose_multiple(&mut rand::rng(), SAMPLE_SIZE);
    let confirmed_sample = check_sample(&gateway, sample.copied()).await;

    let sale_seconds = crowd.finished.duration_since(crowd.started).as_secs_f64();
    let mut report = SaleReport {
        product_id: product,
        stock: config.stock,
        buyers: config.buyers,
        accepted: tally.accepted,
        outcomes: tally.outcomes,
        failure_codes: tally.failure_codes,
        refusal_messages: tally.refusal_messages,
        token_failures: tally.token_failures,
        orders_in_mysql: state.orders,
        redis_stock: state.redis_stock,
        mysql_stock: state.mysql_stock,
        flows: state.flows,
        sale_seconds,
        drain_seconds: drain_seconds.map(|d| d.as_secs_f64()),
        requests: tally.requests,
        requests_per_sec: if sale_seconds > 0.0 {
            tally.requests as f64 / sale_seconds
        } else {
            0.0
        },
        purchases: tally.purchases,
        purchase_seconds,
        purchases_per_sec: purchase_seconds
            .filter(|secs| *secs > 0.0)
            .map(|secs| tally.purchases as f64 / secs),
        sell_seconds: sell_seconds.map(|d| d.as_secs_f64()),
        target_rate: config.rate,
        purchase_latency_ms: Percentiles::of(tally.purchase_latencies_ms),
        accepted_latency_ms: Percentiles::of(tally.accepted_latencies_ms),
        confirmed_sample,
        violations: Vec::new(),
        after_sale: None,
    };
    report.violations = report.check_invariants(config.stock);
    if let Some(after) = &config.after_sale {
        let accepted = accepted
            .iter()
            .map(|(user, token)| (*user, (*token).to_owned()))
            .collect();
        let after_sale = after_sale::run(&gateway, config, after, accepted).await?;
        report
            .violations
            .extend(after_sale.check_invariants(report.accepted));
        report.after_sale = Some(after_sale);
    }
    Ok(report)
}

fn describe(gateway: &Gateway, what: &str, refusal: &Refusal) -> anyhow::Error {
    match refusal.status {
        None => anyhow::anyhow!(
            "cannot {what}: the gateway at {} cannot be reached ({}: {})",
            gateway.base(),
            refusal.code,
            refusal.message
        ),
        Some(status) => anyhow::anyhow!(
            "cannot {what}: the gateway at {} answered {status} {}: {}",
            gateway.base(),
            refusal.code,
            refusal.message
        ),
    }
}

fn progress_bar(config: &SaleConfig) -> ProgressBar {
    if !config.progress {
        return ProgressBar::hidden();
    }
    // The stderr target draws nothing when stderr is not a terminal (CI, `| tee`).
    let bar =
        ProgressBar::with_draw_target(Some(u64::from(config.buyers)), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{elapsed:>4} [{bar:40}] {pos}/{len} buyers · {rate} · {msg}")
            .expect("the template is valid")
            .with_key("rate", |state: &ProgressState, w: &mut dyn fmt::Write| {
                let _ = write!(w, "{:.0} buyers/s", state.per_sec());
            })
            .progress_chars("=> "),
    );
    bar
}

/// Polls the product until MySQL holds `accepted` orders or the drain timeout passes.
/// Returns the last state read and, when drained, the moment the count first reached it.
async fn wait_for_drain(
    gateway: &Gateway,
    config: &SaleConfig,
    accepted: u64,
    watch: &Mutex<DrainWatch>,
) -> anyhow::Result<(ProductState, Option<Instant>)> {
    let target = i64::try_from(accepted).unwrap_or(i64::MAX);
    let deadline = Instant::now() + config.drain_timeout;
    let mut last: Option<ProductState> = None;
    let mut last_error = None;
    loop {
        match gateway.product_state(config.product_id).await {
            Ok(state) => {
                let since = watch
                    .lock()
                    .expect("the watch is never poisoned")
                    .observe(state.orders, Instant::now());
                if state.orders >= target {
                    return Ok((state, Some(since)));
                }
                last = Some(state);
            }
            Err(refusal) => last_error = Some(refusal),
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
    match (last, last_error) {
        (Some(state), _) => Ok((state, None)),
        (None, Some(refusal)) => Err(describe(
            gateway,
            "read the product after the sale",
            &refusal,
        )),
        (None, None) => bail!("the product was never read after the sale"),
    }
}

/// Asks each sampled buyer for their order, all at once; "queued" is asked again for a
/// moment.
async fn check_sample(gateway: &Gateway, sample: impl Iterator<Item = (u64, &str)>) -> SampleCheck {
    let mut checks = JoinSet::new();
    for (user, order_token) in sample {
        let (gateway, order_token) = (gateway.clone(), order_token.to_owned());
        checks.spawn(async move {
            confirmed(&gateway, user, &order_token)
                .await
                .map_err(|seen| format!("order {order_token} of user {user}: {seen}"))
        });
    }
    let mut check = SampleCheck::default();
    while let Some(result) = checks.join_next().await {
        check.checked += 1;
        match result {
            Ok(Ok(())) => check.ok += 1,
            Ok(Err(problem)) => check.problems.push(problem),
            Err(error) => check.problems.push(format!("the check panicked: {error}")),
        }
    }
    check.problems.sort();
    check
}

/// `Ok` once the order reads "confirmed"; else what was last seen when the grace ran out.
async fn confirmed(gateway: &Gateway, user: u64, order_token: &str) -> Result<(), String> {
    let deadline = Instant::now() + CONFIRM_GRACE;
    loop {
        let seen = match gateway.order_status(user, order_token).await {
            Ok(order) if order.status == "confirmed" => return Ok(()),
            Ok(order) => format!("status {}", order.status),
            Err(refusal) => format!(
                "{} {}: {}",
                refusal
                    .status
                    .map_or("no answer".to_owned(), |s| s.to_string()),
                refusal.code,
                refusal.message
            ),
        };
        if Instant::now() >= deadline {
            return Err(seen);
        }
        // Within the buyer's rate limit (5/s) so the retries are not refused themselves.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
