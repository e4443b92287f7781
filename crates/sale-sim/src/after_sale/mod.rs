//! The story after the click: once the first wave has sold out and its orders are
//! confirmed, each winner pays, cancels or walks away ([`plan`]); the simulated payment
//! provider calls the webhook, signed, now and then twice, sometimes too late, and a
//! stranger tries forged callbacks ([`provider`]); a sample of buyers follows its order's
//! event stream ([`sse`]); the walked-away orders expire; a second wave buys the units that
//! came back; and the product's counts are held to what happened ([`report`]).

mod plan;
mod provider;
pub mod report;
mod sse;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use indicatif::ProgressBar;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use report::{AfterSaleReport, FinalState, Planned, SecondWave, StreamCheck};

use crate::SaleConfig;
use crate::crowd::{self, Tally, for_each_bounded};
use crate::gateway::{Gateway, OrderStatus, Refusal};
use plan::{Fate, Plan, Shares};
use provider::Provider;

/// The local stack's webhook secret (`payments.webhook_secret` in `config/local.toml`).
pub const DEFAULT_WEBHOOK_SECRET: &str = "dev-webhook-secret-change-me";

/// How long every watched stream has to show the order's current status before the
/// buyers act: a stream opened after the change would have nothing to be late for.
const STREAMS_OPEN: Duration = Duration::from_secs(5);
/// How long the streams have, once the last change happened, to show it and end.
const STREAMS_GRACE: Duration = Duration::from_secs(3);
/// The longest long-poll the gateway takes (`?wait_secs=`).
const MAX_WAIT_SECS: u64 = 30;
/// A queued order is asked again after this long at most.
const CONFIRM_WAIT_SECS: u64 = 5;
/// How long to back off when the gateway has no long-poll seat left, or did not answer.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// The after-sale phase: what share does what, and how long to wait for it.
#[derive(Debug, Clone)]
pub struct AfterSaleConfig {
    /// Of the first wave's orders, the share paid.
    pub pay_share: f64,
    /// Of the first wave's orders, the share cancelled; the rest are abandoned.
    pub cancel_share: f64,
    /// Of the payments, the share whose callback is sent twice.
    pub duplicate_share: f64,
    /// Abandoned orders paid once they expired (each must become a refund due).
    pub late_payments: usize,
    /// Callbacks with a bad signature (each must be refused and change nothing).
    pub forged_callbacks: usize,
    /// Orders followed on their event stream.
    pub watch_sample: usize,
    /// How long to wait for the abandoned orders to expire; their `pay_by` must fall
    /// within it.
    pub expiry_timeout: Duration,
    /// Buyers of the returned units; `None`: four per returned unit.
    pub second_wave_buyers: Option<u32>,
    /// Seeds the split, so that a run can be repeated.
    pub seed: u64,
    /// The HMAC key of the payment callbacks.
    pub webhook_secret: String,
}

impl Default for AfterSaleConfig {
    /// The demo's: 70 % pay, 15 % cancel, 15 % walk away; 10 % of the callbacks twice,
    /// three late, two forged; twenty streams; two minutes for the orders to expire.
    fn default() -> Self {
        Self {
            pay_share: 0.7,
            cancel_share: 0.15,
            duplicate_share: 0.1,
            late_payments: 3,
            forged_callbacks: 2,
            watch_sample: 20,
            expiry_timeout: Duration::from_secs(120),
            second_wave_buyers: None,
            seed: 42,
            webhook_secret: DEFAULT_WEBHOOK_SECRET.to_owned(),
        }
    }
}

impl AfterSaleConfig {
    /// Shares out of range, or paying and cancelling more than there is, are refused.
    pub fn validate(&self) -> Result<(), String> {
        for (name, share) in [
            ("pay share", self.pay_share),
            ("cancel share", self.cancel_share),
            ("duplicate share", self.duplicate_share),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return Err(format!("the {name} must be between 0 and 1, not {share}"));
            }
        }
        if self.pay_share + self.cancel_share > 1.0 + 1e-9 {
            return Err(format!(
                "the pay share {} and the cancel share {} add up to more than 1",
                self.pay_share, self.cancel_share
            ));
        }
        Ok(())
    }

    fn shares(&self) -> Shares {
        Shares {
            pay: self.pay_share,
            cancel: self.cancel_share,
            duplicate: self.duplicate_share,
            late: self.late_payments,
            watch: self.watch_sample,
            forged: self.forged_callbacks,
        }
    }
}

/// A won order as its buyer holds it once it is confirmed.
#[derive(Debug, Clone)]
struct Order {
    user: u64,
    token: String,
    quantity: u32,
    pay_by: Option<DateTime<Utc>>,
}

/// What one buyer's (or the provider's) step came to.
#[derive(Debug, Default)]
struct Step {
    index: usize,
    /// The change asked for happened, and when its answer came back.
    done_at: Option<Instant>,
    /// For a duplicated callback: whether the second answer was the first one again.
    same_answer: Option<bool>,
    /// For a late payment: whether it was answered 409 ORDER_CLOSED.
    refund_due: Option<bool>,
    problems: Vec<String>,
}

/// Runs the after-sale of the first wave's accepted orders (buyer, order token). `Err`
/// only when a task of ours panicked; everything the gateway did wrong is in the report.
pub(crate) async fn run(
    gateway: &Gateway,
    config: &SaleConfig,
    after: &AfterSaleConfig,
    first_wave: Vec<(u64, String)>,
) -> anyhow::Result<AfterSaleReport> {
    let concurrency = config.concurrency.max(1);
    let price = config.price_cents.unwrap_or(0);
    let provider = Provider::new(&after.webhook_secret);
    let mut report = AfterSaleReport {
        price_cents: price,
        seed: after.seed,
        ..AfterSaleReport::default()
    };
    let mut tokens: Vec<String> = first_wave.iter().map(|(_, t)| t.clone()).collect();

    let (orders, problems) =
        confirm_all(gateway, first_wave, concurrency, config.drain_timeout).await?;
    report.confirmed = orders.len() as u64;
    report.problems.extend(problems);

    let plan = Plan::new(orders.len(), &after.shares(), after.seed);
    report.planned = Planned {
        pay: plan.count(Fate::Pay) as u64,
        cancel: plan.count(Fate::Cancel) as u64,
        abandon: plan.count(Fate::Abandon) as u64,
    };

    // Streams open before anything happens, and stay open at most until every abandoned
    // order may have expired, with a minute for the payments and cancels before that.
    let open_for = after.expiry_timeout + STREAMS_OPEN + STREAMS_GRACE + Duration::from_secs(60);
    let mut watchers: Vec<Watcher> = plan
        .watched
        .iter()
        .map(|&i| Watcher::start(gateway, i, &orders[i], open_for))
        .collect();
    let opened = Instant::now() + STREAMS_OPEN;
    for watcher in &mut watchers {
        watcher.wait_first(opened).await;
    }

    for (nth, &i) in plan.forged.iter().enumerate() {
        let order = &orders[i];
        let genuine = provider.payment(
            &payment_id(&order.token),
            &order.token,
            amount(price, order),
            Utc::now(),
        );
        report.forged_callbacks += 1;
        match forged(gateway, order, &provider.forgery(&genuine, nth)).await {
            Ok(()) => report.forged_refused += 1,
            Err(problem) => report.problems.push(problem),
        }
    }

    let actions: Vec<(usize, Order, Fate, bool)> = orders
        .iter()
        .enumerate()
        .filter(|(i, _)| plan.fates[*i] != Fate::Abandon)
        .map(|(i, order)| {
            (
                i,
                order.clone(),
                plan.fates[i],
                plan.duplicated.contains(&i),
            )
        })
        .collect();
    let steps = for_each_bounded(actions, concurrency, {
        let (gateway, provider) = (gateway.clone(), provider.clone());
        move |(index, order, fate, duplicated)| {
            let (gateway, provider) = (gateway.clone(), provider.clone());
            async move {
                let mut step = match fate {
                    Fate::Pay => pay(&gateway, &provider, price, &order, duplicated).await,
                    _ => cancel(&gateway, &order).await,
                };
                step.index = index;
                step
            }
        }
    })
    .await?;
    let mut changed_at: BTreeMap<usize, Instant> = BTreeMap::new();
    for step in steps {
        if let Some(at) = step.done_at {
            changed_at.insert(step.index, at);
            match plan.fates[step.index] {
                Fate::Pay => report.paid += 1,
                _ => report.cancelled += 1,
            }
        }
        if let Some(same) = step.same_answer {
            report.duplicate_callbacks += 1;
            report.duplicates_answered_same += u64::from(same);
        }
        report.problems.extend(step.problems);
    }

    let abandoned: Vec<(usize, Order, bool)> = orders
        .iter()
        .enumerate()
        .filter(|(i, _)| plan.fates[*i] == Fate::Abandon)
        .map(|(i, order)| (i, order.clone(), plan.late.contains(&i)))
        .collect();
    match window_too_long(&abandoned, after.expiry_timeout) {
        Some(problem) => report.problems.push(problem),
        None => {
            let deadline = Instant::now() + after.expiry_timeout;
            let steps = for_each_bounded(abandoned, concurrency, {
                let (gateway, provider) = (gateway.clone(), provider.clone());
                move |(index, order, late)| {
                    let (gateway, provider) = (gateway.clone(), provider.clone());
                    async move {
                        let mut step = expire(&gateway, &order, deadline).await;
                        if late && step.done_at.is_some() {
                            pay_late(&gateway, &provider, price, &order, &mut step).await;
                        }
                        step.index = index;
                        step
                    }
                }
            })
            .await?;
            for step in steps {
                if let Some(at) = step.done_at {
                    changed_at.insert(step.index, at);
                    report.expired += 1;
                }
                if let Some(refund_due) = step.refund_due {
                    report.late_payments += 1;
                    report.refunds_due += u64::from(refund_due);
                }
                report.problems.extend(step.problems);
            }
        }
    }

    let grace = Instant::now() + STREAMS_GRACE;
    for watcher in watchers {
        let index = watcher.index;
        let seen = watcher.finish(grace).await;
        let fate = plan.fates[index];
        report.streams.watched += 1;
        match judge_stream(&seen, fate.final_status(), changed_at.get(&index).copied()) {
            Ok(delay) => {
                report.streams.saw_final += 1;
                let ms = delay.as_secs_f64() * 1e3;
                report.streams.worst_delay_ms =
                    Some(report.streams.worst_delay_ms.map_or(ms, |w| w.max(ms)));
            }
            Err(problem) => report.streams.problems.push(format!(
                "stream of order {} ({fate:?}): {problem}",
                orders[index].token
            )),
        }
    }

    let returned = report.cancelled + report.expired;
    if returned > 0 {
        let (wave, wave_tokens) = second_wave(
            gateway,
            config,
            after,
            &provider,
            returned,
            &mut report.problems,
        )
        .await?;
        tokens.extend(wave_tokens);
        report.second_wave = Some(wave);
    }
    let distinct: HashSet<&String> = tokens.iter().collect();
    report.all_tokens_distinct = distinct.len() == tokens.len();
    report.final_state = final_state(gateway, config.product_id).await;
    report.problems.sort();
    report.streams.problems.sort();
    Ok(report)
}

/// The provider's id of an order's payment: one per order, so that a callback sent again
/// is recognised as the same payment.
fn payment_id(token: &str) -> String {
    format!("pay-{token}")
}

fn amount(price_cents: u64, order: &Order) -> u64 {
    price_cents * u64::from(order.quantity)
}

fn said(refusal: &Refusal) -> String {
    match refusal.status {
        Some(status) => format!("{status} {}: {}", refusal.code, refusal.message),
        None => format!("no answer ({}: {})", refusal.code, refusal.message),
    }
}

/// Waits until every order reads `confirmed` (MySQL holds it, with its `pay_by`), sorted by
/// buyer so that the seeded split falls the same way over the same orders.
async fn confirm_all(
    gateway: &Gateway,
    accepted: Vec<(u64, String)>,
    concurrency: u32,
    timeout: Duration,
) -> anyhow::Result<(Vec<Order>, Vec<String>)> {
    let deadline = Instant::now() + timeout;
    let results = for_each_bounded(accepted, concurrency, {
        let gateway = gateway.clone();
        move |(user, token)| {
            let gateway = gateway.clone();
            async move { confirm(&gateway, user, token, deadline).await }
        }
    })
    .await?;
    let mut orders = Vec::with_capacity(results.len());
    let mut problems = Vec::new();
    for result in results {
        match result {
            Ok(order) => orders.push(order),
            Err(problem) => problems.push(problem),
        }
    }
    orders.sort_by(|a, b| (a.user, &a.token).cmp(&(b.user, &b.token)));
    Ok((orders, problems))
}

async fn confirm(
    gateway: &Gateway,
    user: u64,
    token: String,
    deadline: Instant,
) -> Result<Order, String> {
    let mut last = "never asked".to_owned();
    // A long-poll waits for any change, so it is for a queued order only: one already
    // confirmed would be answered only when it changes again.
    let mut queued = false;
    while Instant::now() < deadline {
        let asked = Instant::now();
        let answer = if queued {
            gateway.order_change(user, &token, CONFIRM_WAIT_SECS).await
        } else {
            gateway.order_status(user, &token).await
        };
        match answer {
            Ok(order) if order.status == "confirmed" => {
                let pay_by = match order.pay_by.as_deref().map(DateTime::parse_from_rfc3339) {
                    Some(Ok(at)) => Some(at.with_timezone(&Utc)),
                    Some(Err(error)) => {
                        return Err(format!("order {token}: unreadable pay_by: {error}"));
                    }
                    None => None,
                };
                return Ok(Order {
                    user,
                    quantity: order.quantity.unwrap_or(1),
                    token,
                    pay_by,
                });
            }
            Ok(order) if order.status == "queued" => {
                last = "still queued".to_owned();
                if queued {
                    unchanged_early(asked).await;
                }
                queued = true;
            }
            Ok(order) => {
                return Err(format!(
                    "order {token} of user {user}: {} before anyone acted",
                    order.status
                ));
            }
            Err(refusal) => {
                last = said(&refusal);
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
    Err(format!(
        "order {token} of user {user} never read confirmed: {last}"
    ))
}

/// A long-poll answered at once with nothing new (a gateway that does not wait, or one
/// closing its watchers) is not asked again at once.
async fn unchanged_early(asked: Instant) {
    if asked.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(RETRY_AFTER).await;
    }
}

/// Sends a forged callback: it must be refused (401) and the order still be confirmed.
async fn forged(
    gateway: &Gateway,
    order: &Order,
    forgery: &provider::Callback,
) -> Result<(), String> {
    let token = &order.token;
    match gateway
        .notify_payment(forgery.body.clone(), &forgery.signature)
        .await
    {
        Err(refusal) if refusal.status == Some(401) => {}
        Err(refusal) => {
            return Err(format!(
                "forged callback for {token}: {}, expected 401",
                said(&refusal)
            ));
        }
        Ok(answer) => return Err(format!("forged callback for {token}: accepted ({answer})")),
    }
    match gateway.order_status(order.user, token).await {
        Ok(now) if now.status == "confirmed" => Ok(()),
        Ok(now) => Err(format!(
            "forged callback for {token}: the order is now {}",
            now.status
        )),
        Err(refusal) => Err(format!(
            "after a forged callback for {token}: {}",
            said(&refusal)
        )),
    }
}

/// The provider's callback for the order, sent twice when `duplicated`: the second must be
/// answered as the first.
async fn pay(
    gateway: &Gateway,
    provider: &Provider,
    price: u64,
    order: &Order,
    duplicated: bool,
) -> Step {
    let mut step = Step::default();
    let callback = provider.payment(
        &payment_id(&order.token),
        &order.token,
        amount(price, order),
        Utc::now(),
    );
    let first = gateway
        .notify_payment(callback.body.clone(), &callback.signature)
        .await;
    match &first {
        Ok(answer) if answer["status"] == "paid" => step.done_at = Some(Instant::now()),
        Ok(answer) => step
            .problems
            .push(format!("payment of {}: answered {answer}", order.token)),
        Err(refusal) => {
            step.problems
                .push(format!("payment of {}: {}", order.token, said(refusal)))
        }
    }
    if duplicated {
        let second = gateway
            .notify_payment(callback.body, &callback.signature)
            .await;
        let same = second == first;
        if !same {
            step.problems.push(format!(
                "payment of {} sent again: answered {:?}, first {:?}",
                order.token, second, first
            ));
        }
        step.same_answer = Some(same);
    }
    step
}

async fn cancel(gateway: &Gateway, order: &Order) -> Step {
    let mut step = Step::default();
    match gateway.cancel(order.user, &order.token).await {
        Ok(answer) if answer.status == "cancelled" => step.done_at = Some(Instant::now()),
        Ok(answer) => step.problems.push(format!(
            "cancel of {}: answered {}",
            order.token, answer.status
        )),
        Err(refusal) => {
            step.problems
                .push(format!("cancel of {}: {}", order.token, said(&refusal)))
        }
    }
    step
}

/// A problem when the last abandoned order's `pay_by` is further off than the time we
/// may wait: waiting would only end in a timeout.
fn window_too_long(abandoned: &[(usize, Order, bool)], timeout: Duration) -> Option<String> {
    let latest = abandoned
        .iter()
        .filter_map(|(_, order, _)| order.pay_by)
        .max()?;
    let ends_in = (latest - Utc::now()).to_std().unwrap_or_default();
    (ends_in > timeout).then(|| {
        format!(
            "the payment window ends {} s from now, past the expiry timeout of {} s: start the services with a shorter orders.payment_window_secs",
            ends_in.as_secs(),
            timeout.as_secs()
        )
    })
}

/// Long-polls the order until it reads `expired` or `deadline` passes.
async fn expire(gateway: &Gateway, order: &Order, deadline: Instant) -> Step {
    let mut step = Step::default();
    let mut last = "never asked".to_owned();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            step.problems.push(format!(
                "abandoned order {} not expired within the timeout (pay_by {}): {last}",
                order.token,
                order
                    .pay_by
                    .map_or_else(|| "unknown".to_owned(), |at| at.to_rfc3339())
            ));
            return step;
        }
        let wait = left.as_secs().clamp(1, MAX_WAIT_SECS);
        let asked = Instant::now();
        match gateway.order_change(order.user, &order.token, wait).await {
            Ok(now) if now.status == "expired" => {
                step.done_at = Some(Instant::now());
                return step;
            }
            Ok(now) if now.status == "confirmed" => {
                last = "still confirmed".to_owned();
                unchanged_early(asked).await;
            }
            Ok(now) => {
                step.problems.push(format!(
                    "abandoned order {} became {}",
                    order.token, now.status
                ));
                return step;
            }
            Err(refusal) => {
                last = said(&refusal);
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
}

/// A payment for an order that expired: it must be refused as ORDER_CLOSED (a refund due).
async fn pay_late(
    gateway: &Gateway,
    provider: &Provider,
    price: u64,
    order: &Order,
    step: &mut Step,
) {
    let callback = provider.payment(
        &format!("late-{}", order.token),
        &order.token,
        amount(price, order),
        Utc::now(),
    );
    let answer = gateway
        .notify_payment(callback.body, &callback.signature)
        .await;
    let refund_due = matches!(&answer, Err(r) if r.status == Some(409) && r.code == "ORDER_CLOSED");
    if !refund_due {
        let answer = match answer {
            Ok(body) => format!("200 {body}"),
            Err(refusal) => said(&refusal),
        };
        step.problems.push(format!(
            "late payment of expired order {}: {answer}, expected 409 ORDER_CLOSED",
            order.token
        ));
    }
    step.refund_due = Some(refund_due);
}

/// Sells the returned units to a fresh crowd (buyers after the first wave's), waits for its
/// orders to be confirmed, and pays them all.
async fn second_wave(
    gateway: &Gateway,
    config: &SaleConfig,
    after: &AfterSaleConfig,
    provider: &Provider,
    returned: u64,
    problems: &mut Vec<String>,
) -> anyhow::Result<(SecondWave, Vec<String>)> {
    let buyers = after
        .second_wave_buyers
        .unwrap_or_else(|| u32::try_from(returned.saturating_mul(4)).unwrap_or(u32::MAX));
    let wave = SaleConfig {
        buyers,
        first_user_id: config.first_user_id + u64::from(config.buyers),
        progress: false,
        tokens_first: false,
        rate: None,
        after_sale: None,
        ..config.clone()
    };
    let concurrency = wave.concurrency.max(1);
    let crowd = crowd::run(gateway, &wave, concurrency, &ProgressBar::hidden()).await?;
    let tally = Tally::of(&crowd.buyers);
    let accepted: Vec<(u64, String)> = crowd
        .buyers
        .iter()
        .filter_map(|b| b.order_token().map(|token| (b.user, token.to_owned())))
        .collect();
    let tokens = accepted.iter().map(|(_, token)| token.clone()).collect();
    let (orders, unconfirmed) =
        confirm_all(gateway, accepted, concurrency, config.drain_timeout).await?;
    problems.extend(unconfirmed);
    let price = config.price_cents.unwrap_or(0);
    let steps = for_each_bounded(orders.clone(), concurrency, {
        let (gateway, provider) = (gateway.clone(), provider.clone());
        move |order| {
            let (gateway, provider) = (gateway.clone(), provider.clone());
            async move { pay(&gateway, &provider, price, &order, false).await }
        }
    })
    .await?;
    let mut paid = 0;
    for step in steps {
        paid += u64::from(step.done_at.is_some());
        problems.extend(step.problems);
    }
    Ok((
        SecondWave {
            buyers,
            returned,
            accepted: tally.accepted,
            outcomes: tally.outcomes,
            failure_codes: tally.failure_codes,
            confirmed: orders.len() as u64,
            paid,
        },
        tokens,
    ))
}

async fn final_state(gateway: &Gateway, product: u64) -> Option<FinalState> {
    for _ in 0..3 {
        if let Ok(state) = gateway.product_state(product).await {
            return Some(FinalState {
                initial_stock: state.initial_stock,
                redis_stock: state.redis_stock,
                mysql_stock: state.mysql_stock,
                orders: state.orders,
                paid: state.paid,
                returned: state.returned,
                refunds_due: state.refunds_due,
            });
        }
        tokio::time::sleep(RETRY_AFTER).await;
    }
    None
}

/// The statuses a stream showed, each with when it arrived.
type Seen = Vec<(String, Instant)>;

/// One order's event stream, read on a task of its own.
struct Watcher {
    index: usize,
    seen: Arc<Mutex<Seen>>,
    first: oneshot::Receiver<()>,
    task: JoinHandle<Result<(), String>>,
}

impl Watcher {
    fn start(gateway: &Gateway, index: usize, order: &Order, open_for: Duration) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (first_tx, first) = oneshot::channel();
        let task = tokio::spawn(follow(
            gateway.clone(),
            order.user,
            order.token.clone(),
            open_for,
            Arc::clone(&seen),
            first_tx,
        ));
        Self {
            index,
            seen,
            first,
            task,
        }
    }

    /// Until the stream showed its first status, failed, or `until` passed.
    async fn wait_first(&mut self, until: Instant) {
        // The sender is dropped when the stream fails: done waiting either way.
        let _ = tokio::time::timeout_at(until.into(), &mut self.first).await;
    }

    /// What the stream showed, once it ended or `until` passed (then it is stopped).
    async fn finish(self, until: Instant) -> Result<Seen, String> {
        let mut task = self.task;
        let ended = tokio::time::timeout_at(until.into(), &mut task).await;
        let seen = self.seen.lock().expect("never poisoned").clone();
        match ended {
            Ok(Ok(Ok(()))) => Ok(seen),
            Ok(Ok(Err(error))) if seen.is_empty() => Err(error),
            Ok(Ok(Err(_))) => Ok(seen),
            Ok(Err(error)) => Err(format!("the stream's task failed: {error}")),
            Err(_) => {
                task.abort();
                Ok(seen)
            }
        }
    }
}

/// Reads the order's stream, noting each status and when it came, until a final one.
async fn follow(
    gateway: Gateway,
    user: u64,
    token: String,
    open_for: Duration,
    seen: Arc<Mutex<Seen>>,
    first: oneshot::Sender<()>,
) -> Result<(), String> {
    let mut response = gateway
        .order_events(user, &token, open_for)
        .await
        .map_err(|refusal| format!("not opened: {}", said(&refusal)))?;
    let mut parser = sse::Parser::default();
    let mut first = Some(first);
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| format!("broke off: {error}"))?
    {
        let at = Instant::now();
        for event in parser.feed(&chunk) {
            if event.name != "status" {
                continue;
            }
            let order: OrderStatus = serde_json::from_str(&event.data)
                .map_err(|error| format!("unreadable event {:?}: {error}", event.data))?;
            let last = is_final(&order.status);
            seen.lock()
                .expect("never poisoned")
                .push((order.status, at));
            if let Some(first) = first.take() {
                let _ = first.send(());
            }
            if last {
                return Ok(());
            }
        }
    }
    Ok(())
}

fn is_final(status: &str) -> bool {
    matches!(status, "paid" | "cancelled" | "expired" | "failed")
}

/// Whether a stream showed `confirmed` first and `expected` last, and how long after the
/// change (`changed_at`, when the buyer's own request learnt of it) the last came.
fn judge_stream(
    seen: &Result<Seen, String>,
    expected: &str,
    changed_at: Option<Instant>,
) -> Result<Duration, String> {
    let seen = seen.as_ref().map_err(Clone::clone)?;
    let statuses: Vec<&str> = seen.iter().map(|(status, _)| status.as_str()).collect();
    match (seen.first(), seen.last()) {
        (None, _) | (_, None) => Err("showed no status".to_owned()),
        (Some((first, _)), _) if first != "confirmed" => {
            Err(format!("showed {statuses:?}, not confirmed first"))
        }
        (_, Some((last, _))) if last != expected => {
            Err(format!("showed {statuses:?}, not {expected} last"))
        }
        (_, Some((_, at))) => match changed_at {
            Some(changed_at) => Ok(at.saturating_duration_since(changed_at)),
            None => Err(format!("showed {expected} though its buyer never saw it")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(statuses: &[(&str, u64)], start: Instant) -> Result<Seen, String> {
        Ok(statuses
            .iter()
            .map(|(s, ms)| ((*s).to_owned(), start + Duration::from_millis(*ms)))
            .collect())
    }

    #[test]
    fn a_stream_that_shows_confirmed_then_the_end_is_timed_from_the_change() {
        let start = Instant::now();
        let stream = seen(&[("confirmed", 0), ("paid", 530)], start);
        let changed = start + Duration::from_millis(500);
        assert_eq!(
            judge_stream(&stream, "paid", Some(changed)),
            Ok(Duration::from_millis(30))
        );
    }

    #[test]
    fn an_event_before_the_buyers_own_answer_is_no_delay() {
        let start = Instant::now();
        let stream = seen(&[("confirmed", 0), ("cancelled", 100)], start);
        let changed = start + Duration::from_millis(120);
        assert_eq!(
            judge_stream(&stream, "cancelled", Some(changed)),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn a_stream_that_missed_the_end_or_the_start_fails() {
        let start = Instant::now();
        let at = Some(start);
        assert!(judge_stream(&seen(&[("confirmed", 0)], start), "expired", at).is_err());
        assert!(judge_stream(&seen(&[("paid", 0)], start), "paid", at).is_err());
        assert!(judge_stream(&seen(&[], start), "paid", at).is_err());
        assert!(judge_stream(&Err("not opened: 429".into()), "paid", at).is_err());
        assert!(
            judge_stream(&seen(&[("confirmed", 0), ("paid", 9)], start), "paid", None).is_err()
        );
    }

    #[test]
    fn shares_that_cannot_be_are_refused() {
        let fine = AfterSaleConfig::default();
        assert_eq!(fine.validate(), Ok(()));
        let too_much = AfterSaleConfig {
            pay_share: 0.9,
            cancel_share: 0.2,
            ..fine.clone()
        };
        assert!(too_much.validate().is_err());
        let negative = AfterSaleConfig {
            duplicate_share: -0.1,
            ..fine
        };
        assert!(negative.validate().is_err());
    }

    #[test]
    fn a_payment_is_the_price_times_the_quantity() {
        let order = Order {
            user: 1,
            token: "7-00".into(),
            quantity: 3,
            pay_by: None,
        };
        assert_eq!(amount(1999, &order), 5997);
        assert_eq!(payment_id("7-00"), "pay-7-00");
    }
}
