//! The crowd: `concurrency` workers take the next buyer until none is left, each buyer a
//! token request then a purchase; or, for measuring the purchase alone, every token first
//! and then the purchases — closed loop at `concurrency`, or open loop at a fixed rate.
//! And the watch that notes when MySQL's order count last moved.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::ProgressBar;
use tokio::task::JoinSet;

use crate::SaleConfig;
use crate::gateway::{Gateway, Refusal};
use crate::report::{ACCEPTED, SOLD_OUT};

/// Which request of a buyer a refusal answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Token,
    Purchase,
}

/// What happened to one buyer.
#[derive(Debug, Clone)]
pub struct Buyer {
    pub user: u64,
    /// The order token of an accepted purchase, or the refusal that stopped the buyer.
    pub outcome: Result<String, (Step, Refusal)>,
    /// HTTP requests sent: 1 when the token was refused, else 2.
    pub requests: u32,
    /// When the purchase request went out and how long its answer took.
    pub purchase: Option<(Instant, Duration)>,
}

impl Buyer {
    pub fn order_token(&self) -> Option<&str> {
        self.outcome.as_deref().ok()
    }
}

/// Every buyer, and when the first started and the last finished.
#[derive(Debug)]
pub struct Crowd {
    pub buyers: Vec<Buyer>,
    pub started: Instant,
    pub finished: Instant,
}

/// Runs every buyer of the sale, at most `concurrency` at once, on tokio tasks so the
/// requests spread over the runtime's threads.
pub async fn run(
    gateway: &Gateway,
    config: &SaleConfig,
    concurrency: u32,
    progress: &ProgressBar,
) -> anyhow::Result<Crowd> {
    let next = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(AtomicU64::new(0));
    let buyers = u64::from(config.buyers);
    let mut workers = JoinSet::new();
    let started = Instant::now();
    for _ in 0..u64::from(concurrency).min(buyers) {
        let (gateway, next, accepted) = (gateway.clone(), next.clone(), accepted.clone());
        let (product, first_user, progress) =
            (config.product_id, config.first_user_id, progress.clone());
        workers.spawn(async move {
            let mut done = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= buyers {
                    return done;
                }
                let buyer = buy(&gateway, product, first_user + n).await;
                if buyer.outcome.is_ok() {
                    let total = accepted.fetch_add(1, Ordering::Relaxed) + 1;
                    progress.set_message(format!("{total} accepted"));
                }
                progress.inc(1);
                done.push(buyer);
            }
        });
    }
    let mut all = Vec::with_capacity(buyers as usize);
    while let Some(done) = workers.join_next().await {
        all.extend(done.context("a buyer task panicked")?);
    }
    Ok(Crowd {
        buyers: all,
        started,
        finished: Instant::now(),
    })
}

/// Every buyer's token first (closed loop, `concurrency` at once), then every purchase:
/// closed loop at `concurrency` when `rate` is `None`, else open loop — purchase `i` goes out
/// at `start + i / rate` whatever the earlier ones are doing, and its latency is counted
/// from that scheduled moment, so a gateway that falls behind cannot hide it by slowing the
/// sender (no coordinated omission).
pub async fn run_tokens_first(
    gateway: &Gateway,
    config: &SaleConfig,
    concurrency: u32,
    rate: Option<f64>,
    progress: &ProgressBar,
) -> anyhow::Result<Crowd> {
    let started = Instant::now();
    let buyers = u64::from(config.buyers);
    let users: Vec<u64> = (0..buyers).map(|n| config.first_user_id + n).collect();
    let product = config.product_id;
    let tokens = for_each_bounded(users, concurrency, {
        let gateway = gateway.clone();
        move |user| {
            let gateway = gateway.clone();
            async move { (user, gateway.issue_token(product, user).await) }
        }
    })
    .await?;
    let mut done = Vec::with_capacity(tokens.len());
    let mut ready = Vec::with_capacity(tokens.len());
    for (user, issued) in tokens {
        match issued {
            Ok(issued) => ready.push((user, issued.token)),
            Err(refusal) => done.push(Buyer {
                user,
                outcome: Err((Step::Token, refusal)),
                requests: 1,
                purchase: None,
            }),
        }
    }
    let purchases = match rate {
        None => {
            for_each_bounded(ready, concurrency, {
                let (gateway, progress) = (gateway.clone(), progress.clone());
                move |(user, token)| {
                    let (gateway, progress) = (gateway.clone(), progress.clone());
                    async move {
                        let buyer = purchase(&gateway, product, user, &token, Instant::now()).await;
                        progress.inc(1);
                        buyer
                    }
                }
            })
            .await?
        }
        Some(rate) => open_loop(gateway, product, ready, rate, progress).await?,
    };
    done.extend(purchases);
    Ok(Crowd {
        buyers: done,
        started,
        finished: Instant::now(),
    })
}

/// Runs `job` on every item, at most `concurrency` at once, on tokio tasks.
pub(crate) async fn for_each_bounded<T, R, F, Fut>(
    items: Vec<T>,
    concurrency: u32,
    job: F,
) -> anyhow::Result<Vec<R>>
where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = R> + Send,
{
    let queue = Arc::new(Mutex::new(items.into_iter()));
    let mut workers = JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (queue, job) = (queue.clone(), job.clone());
        workers.spawn(async move {
            let mut out = Vec::new();
            loop {
                let next = queue.lock().expect("the queue is never poisoned").next();
                let Some(item) = next else { return out };
                out.push(job(item).await);
            }
        });
    }
    let mut all = Vec::new();
    while let Some(out) = workers.join_next().await {
        all.extend(out.context("a crowd task panicked")?);
    }
    Ok(all)
}

/// One task per purchase, each started at its scheduled moment ([`keep_schedule`], on a
/// blocking thread of its own).
async fn open_loop(
    gateway: &Gateway,
    product: u64,
    ready: Vec<(u64, String)>,
    rate: f64,
    progress: &ProgressBar,
) -> anyhow::Result<Vec<Buyer>> {
    let interval = Duration::from_secs_f64(1.0 / rate.max(f64::MIN_POSITIVE));
    let runtime = tokio::runtime::Handle::current();
    let (gateway, progress) = (gateway.clone(), progress.clone());
    let tasks = tokio::task::spawn_blocking(move || {
        keep_schedule(ready, interval, |(user, token), at| {
            let (gateway, progress) = (gateway.clone(), progress.clone());
            runtime.spawn(async move {
                let buyer = purchase(&gateway, product, user, &token, at).await;
                progress.inc(1);
                buyer
            })
        })
    })
    .await
    .context("the purchase schedule's thread panicked")?;
    let mut all = Vec::with_capacity(tasks.len());
    for task in tasks {
        all.push(task.await.context("a purchase task panicked")?);
    }
    Ok(all)
}

/// Calls `launch` with each item and its moment, `interval` apart from now on, and returns
/// what each call returned. Blocks the calling thread, which sleeps on the OS's timer between
/// launches (a few tens of microseconds late), not on Tokio's: its wheel turns in whole
/// milliseconds and rounds every wake-up up to the next one, so counted from the scheduled
/// moment that rounding alone added 0-1 ms to every latency measured, and sent the requests
/// in bursts, one per tick, instead of evenly. A launch that comes late (the thread was not
/// run in time) still gets its own moment, so the delay counts in its latency.
fn keep_schedule<T, R>(
    items: Vec<T>,
    interval: Duration,
    mut launch: impl FnMut(T, Instant) -> R,
) -> Vec<R> {
    let start = Instant::now();
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let at = start + interval.mul_f64(i as f64);
            if let Some(early) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(early);
            }
            launch(item, at)
        })
        .collect()
}

/// The purchase of a buyer who holds a token; its latency counts from `scheduled`.
async fn purchase(
    gateway: &Gateway,
    product: u64,
    user: u64,
    token: &str,
    scheduled: Instant,
) -> Buyer {
    let outcome = gateway.purchase(product, user, token).await;
    Buyer {
        user,
        outcome: outcome
            .map(|queued| queued.order_token)
            .map_err(|refusal| (Step::Purchase, refusal)),
        requests: 2,
        purchase: Some((scheduled, scheduled.elapsed())),
    }
}

async fn buy(gateway: &Gateway, product: u64, user: u64) -> Buyer {
    let token = match gateway.issue_token(product, user).await {
        Ok(issued) => issued.token,
        Err(refusal) => {
            return Buyer {
                user,
                outcome: Err((Step::Token, refusal)),
                requests: 1,
                purchase: None,
            };
        }
    };
    let sent = Instant::now();
    let outcome = gateway.purchase(product, user, &token).await;
    Buyer {
        user,
        outcome: outcome
            .map(|queued| queued.order_token)
            .map_err(|refusal| (Step::Purchase, refusal)),
        requests: 2,
        purchase: Some((sent, sent.elapsed())),
    }
}

/// The crowd's outcomes counted for the report.
#[derive(Debug, Default)]
pub struct Tally {
    pub accepted: u64,
    pub outcomes: BTreeMap<String, u64>,
    pub failure_codes: BTreeSet<String>,
    pub refusal_messages: BTreeMap<String, String>,
    pub token_failures: u64,
    pub requests: u64,
    pub first_purchase: Option<Instant>,
    /// When the last purchase answer came back.
    pub last_answer: Option<Instant>,
    /// Purchases sent (and answered, or given up on).
    pub purchases: u64,
    pub purchase_latencies_ms: Vec<f64>,
    pub accepted_latencies_ms: Vec<f64>,
}

impl Tally {
    pub fn of(buyers: &[Buyer]) -> Self {
        let mut tally = Self::default();
        for buyer in buyers {
            tally.requests += u64::from(buyer.requests);
            if let Some((sent, latency)) = buyer.purchase {
                tally.first_purchase = Some(tally.first_purchase.map_or(sent, |t| t.min(sent)));
                let answered = sent + latency;
                tally.last_answer = Some(tally.last_answer.map_or(answered, |t| t.max(answered)));
                tally.purchases += 1;
                tally
                    .purchase_latencies_ms
                    .push(latency.as_secs_f64() * 1e3);
            }
            let code = match &buyer.outcome {
                Ok(_) => {
                    tally.accepted += 1;
                    if let Some((_, latency)) = buyer.purchase {
                        tally
                            .accepted_latencies_ms
                            .push(latency.as_secs_f64() * 1e3);
                    }
                    ACCEPTED
                }
                Err((step, refusal)) => {
                    if *step == Step::Token {
                        tally.token_failures += 1;
                    }
                    if refusal.is_failure() {
                        tally.failure_codes.insert(refusal.code.clone());
                    }
                    if refusal.code != SOLD_OUT {
                        tally
                            .refusal_messages
                            .entry(refusal.code.clone())
                            .or_insert_with(|| refusal.message.clone());
                    }
                    &refusal.code
                }
            };
            *tally.outcomes.entry(code.to_owned()).or_default() += 1;
        }
        tally
    }
}

/// The order count as last seen, and since when it has been that.
#[derive(Debug, Clone, Copy)]
pub struct DrainWatch {
    orders: i64,
    since: Instant,
}

impl DrainWatch {
    pub fn new(start: Instant) -> Self {
        Self {
            orders: 0,
            since: start,
        }
    }

    /// Notes a reading; returns since when the count has been what it is now.
    pub fn observe(&mut self, orders: i64, at: Instant) -> Instant {
        if orders != self.orders {
            self.orders = orders;
            self.since = at;
        }
        self.since
    }
}

/// Reads the product's order count every `every` until aborted; a failed read is skipped
/// (the read after the crowd is the one that must succeed).
pub async fn watch_orders(
    gateway: Gateway,
    product: u64,
    watch: Arc<Mutex<DrainWatch>>,
    every: Duration,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Ok(state) = gateway.product_state(product).await {
            watch
                .lock()
                .expect("the watch is never poisoned")
                .observe(state.orders, Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(status: Option<u16>, code: &str) -> Refusal {
        Refusal {
            status,
            code: code.into(),
            message: format!("{code} message"),
        }
    }

    fn buyer(user: u64, outcome: Result<String, (Step, Refusal)>) -> Buyer {
        let requests = match &outcome {
            Err((Step::Token, _)) => 1,
            _ => 2,
        };
        Buyer {
            user,
            purchase: (requests == 2).then(|| (Instant::now(), Duration::from_millis(user))),
            outcome,
            requests,
        }
    }

    #[test]
    fn the_tally_counts_every_buyer_under_one_code() {
        let buyers = vec![
            buyer(1, Ok("t1".into())),
            buyer(2, Err((Step::Purchase, refusal(Some(409), SOLD_OUT)))),
            buyer(3, Err((Step::Token, refusal(Some(429), "RATE_LIMITED")))),
            buyer(4, Err((Step::Purchase, refusal(Some(503), "UNAVAILABLE")))),
            buyer(5, Err((Step::Token, refusal(None, "TIMEOUT")))),
        ];
        let tally = Tally::of(&buyers);
        assert_eq!(tally.accepted, 1);
        assert_eq!(tally.outcomes.values().sum::<u64>(), 5);
        assert_eq!(tally.outcomes[ACCEPTED], 1);
        assert_eq!(tally.outcomes["RATE_LIMITED"], 1);
        assert_eq!(tally.token_failures, 2);
        assert_eq!(tally.requests, 8);
        assert_eq!(tally.purchase_latencies_ms.len(), 3);
        assert_eq!(tally.accepted_latencies_ms, vec![1.0]);
        assert_eq!(
            tally.failure_codes,
            BTreeSet::from(["TIMEOUT".to_owned(), "UNAVAILABLE".to_owned()])
        );
        assert!(!tally.refusal_messages.contains_key(SOLD_OUT));
        assert_eq!(
            tally.refusal_messages["RATE_LIMITED"],
            "RATE_LIMITED message"
        );
    }

    #[test]
    fn the_tally_spans_the_purchases_from_the_first_sent_to_the_last_answered() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut buyers = vec![
            buyer(1, Ok("t1".into())),
            buyer(2, Err((Step::Purchase, refusal(Some(409), SOLD_OUT)))),
            buyer(3, Err((Step::Token, refusal(Some(429), "RATE_LIMITED")))),
        ];
        buyers[0].purchase = Some((at(10), Duration::from_millis(50)));
        buyers[1].purchase = Some((at(20), Duration::from_millis(5)));
        let tally = Tally::of(&buyers);
        assert_eq!(tally.purchases, 2);
        assert_eq!(tally.first_purchase, Some(at(10)));
        assert_eq!(tally.last_answer, Some(at(60)));
    }

    #[test]
    fn the_schedule_launches_each_item_in_turn_at_its_moment_never_before() {
        // How late a launch comes is the host's to decide (a loaded CI machine may not run the
        // thread for milliseconds), so it is not asserted: a late launch counts its delay in
        // the latency the sale reports, which is where it shows.
        let interval = Duration::from_micros(300);
        let launched = keep_schedule((0..200).collect(), interval, |item: usize, at| {
            (item, at, Instant::now())
        });
        let items: Vec<usize> = launched.iter().map(|(item, _, _)| *item).collect();
        assert_eq!(items, (0..200).collect::<Vec<_>>());
        for pair in launched.windows(2) {
            let apart = pair[1].1 - pair[0].1;
            assert!(
                apart.abs_diff(interval) < Duration::from_micros(1),
                "{apart:?} apart"
            );
        }
        assert!(launched.iter().all(|(_, at, launched)| launched >= at));
    }

    #[test]
    fn the_drain_watch_remembers_when_the_count_last_moved() {
        let start = Instant::now();
        let later = |ms| start + Duration::from_millis(ms);
        let mut watch = DrainWatch::new(start);
        assert_eq!(watch.observe(0, later(100)), start);
        assert_eq!(watch.observe(40, later(200)), later(200));
        assert_eq!(watch.observe(100, later(300)), later(300));
        assert_eq!(watch.observe(100, later(900)), later(300));
    }
}
