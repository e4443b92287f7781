//! `sends`: transactional against plain sends of the same client. One `OrderPublisher`
//! (or a pool of them, `--producers`, each on a client runtime and producer group of its
//! own) sends order messages from `concurrency` tasks for a fixed window; the transactional
//! sends run a local transaction that commits at once, so what is measured is the client
//! and the broker, not Redis.
//!
//! With `--orders-per-message N` each transactional send carries N orders of one product, as
//! the gateway's batcher sends winners that queued together; `orders_per_sec` counts them.
//!
//! Each transactional send is also cut in two where the client calls the local transaction:
//! `half_ms` is from the call to the local transaction starting (the half message's round
//! trip to the broker, then the hand-off to the client's blocking pool), `end_ms` from there
//! to the call returning (the local transaction, then the one-way END_TRANSACTION write).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use domain::{OrderPlaced, OrderToken, ProductId, UserId};
use order_queue::{LocalTransaction, MqRuntime, OrderPublisher, TxDecision};
use serde_json::json;
use tokio::task::JoinSet;

use crate::cpu::Reading;
use crate::settings::Settings;

#[derive(clap::Args)]
pub struct SendsArgs {
    /// A topic of the bench's own (created with the configured queue count).
    #[arg(long, default_value = "seckill-bench-sends")]
    topic: String,
    /// Producer group prefix; publisher i uses `<group>-<i>`.
    #[arg(long, default_value = "seckill-bench-sender")]
    group: String,
    /// Concurrent sends, each value in turn.
    #[arg(long, value_delimiter = ',', default_value = "8,32,64")]
    concurrency: Vec<usize>,
    /// `tx`, `plain`, or both (alternating within each round).
    #[arg(long, value_delimiter = ',', default_value = "tx,plain")]
    modes: Vec<String>,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Measured window per (mode, concurrency).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Sends before the window opens (connections, routes, JIT of nothing: the pool's threads).
    #[arg(long, default_value_t = 1.0)]
    warmup_secs: f64,
    /// Publishers in the pool; sends go round-robin over them.
    #[arg(long, default_value_t = 1)]
    producers: usize,
    /// Orders in each message, transactional or plain.
    #[arg(long, default_value_t = 1)]
    orders_per_message: usize,
    /// Product id in the messages' order tokens (nothing consumes the topic).
    #[arg(long, default_value_t = 900_000_100)]
    product: u64,
    /// Processes whose CPU use is reported per window (`broker=<pid>`), beside this one's
    /// and the machine's.
    #[arg(long, value_parser = crate::cpu::parse_watch)]
    watch: Vec<(String, u32)>,
}

/// Commits every order at once and notes when it was asked.
#[derive(Default)]
struct CommitAtOnce {
    called: Mutex<HashMap<OrderToken, Instant>>,
}

impl LocalTransaction for CommitAtOnce {
    fn execute(&self, orders: &[OrderPlaced], _: &tracing::Span) -> TxDecision {
        let now = Instant::now();
        let mut called = self
            .called
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for order in orders {
            called.insert(order.order_token.clone(), now);
        }
        TxDecision::Commit
    }
    fn check(&self, _order_tokens: &[OrderToken]) -> TxDecision {
        TxDecision::Commit
    }
}

struct Pool {
    runtimes: Vec<MqRuntime>,
    publishers: Vec<OrderPublisher>,
    local: Arc<CommitAtOnce>,
}

pub async fn run(settings: &Settings, args: &SendsArgs) -> anyhow::Result<()> {
    let pool = start_pool(settings, args).await?;
    let nonce = Arc::new(AtomicU64::new(0));
    for round in 1..=args.rounds {
        for &concurrency in &args.concurrency {
            for mode in &args.modes {
                let tx = match mode.as_str() {
                    "tx" => true,
                    "plain" => false,
                    other => anyhow::bail!("unknown mode {other} (tx or plain)"),
                };
                let (result, cpu) = window(&pool, args, tx, concurrency, &nonce).await;
                println!(
                    "{}",
                    json!({
                        "round": round,
                        "mode": mode,
                        "concurrency": concurrency,
                        "producers": args.producers,
                        "sends": result.sends,
                        "errors": result.errors,
                        "seconds": args.seconds,
                        "sends_per_sec": result.sends as f64 / args.seconds,
                        "orders_per_message": orders_per_message(args),
                        "orders_per_sec": (result.sends * orders_per_message(args) as u64) as f64 / args.seconds,
                        "total_ms": percentiles(result.total_ms),
                        "half_ms": percentiles(result.half_ms),
                        "end_ms": percentiles(result.end_ms),
                        "cores": cpu["cores"],
                        "switches": cpu["switches"],
                    })
                );
            }
        }
    }
    for publisher in &pool.publishers {
        publisher.shutdown().await;
    }
    for runtime in pool.runtimes {
        runtime.shutdown().await;
    }
    Ok(())
}

async fn start_pool(settings: &Settings, args: &SendsArgs) -> anyhow::Result<Pool> {
    let local = Arc::new(CommitAtOnce::default());
    let mut runtimes = Vec::new();
    let mut publishers = Vec::new();
    for i in 0..args.producers.max(1) {
        let mut mq = settings.rocketmq.clone();
        mq.topic = args.topic.clone();
        mq.producer_group = format!("{}-{i}", args.group);
        // As the gateway sizes it: the local transactions run on this pool.
        let runtime = MqRuntime::new(&format!("bench-mq-{i}"), 64)?;
        if i == 0 {
            order_queue::ensure_topic(&runtime, &mq)
                .await
                .context("cannot create the bench topic")?;
        }
        let publisher = OrderPublisher::start(&runtime, &mq, local.clone())
            .await
            .context("cannot start the transactional producer")?;
        runtimes.push(runtime);
        publishers.push(publisher);
    }
    Ok(Pool {
        runtimes,
        publishers,
        local,
    })
}

#[derive(Default)]
struct Window {
    sends: u64,
    errors: u64,
    total_ms: Vec<f64>,
    half_ms: Vec<f64>,
    end_ms: Vec<f64>,
}

async fn window(
    pool: &Pool,
    args: &SendsArgs,
    tx: bool,
    concurrency: usize,
    nonce: &Arc<AtomicU64>,
) -> (Window, serde_json::Value) {
    let opens = Instant::now() + Duration::from_secs_f64(args.warmup_secs);
    let closes = opens + Duration::from_secs_f64(args.seconds);
    let mut workers = JoinSet::new();
    for worker in 0..concurrency.max(1) {
        let publisher = pool.publishers[worker % pool.publishers.len()].clone();
        let (local, nonce) = (pool.local.clone(), nonce.clone());
        let product = ProductId(args.product);
        let per_message = orders_per_message(args);
        workers.spawn(async move {
            let mut mine = Window::default();
            loop {
                let first = nonce.fetch_add(per_message as u64, Ordering::Relaxed);
                let orders: Vec<OrderPlaced> = (first..first + per_message as u64)
                    .map(|n| {
                        OrderPlaced::new(
                            OrderToken::new(product, u128::from(n)),
                            UserId(n + 1),
                            1,
                            0,
                        )
                    })
                    .collect();
                let order = &orders[0];
                // The message's own copy, made before the clock starts.
                let transactional = tx.then(|| orders.clone());
                let sent = Instant::now();
                if sent >= closes {
                    return mine;
                }
                let ok = match transactional {
                    Some(message) => matches!(
                        publisher
                            .send_in_transaction(message, tracing::Span::none())
                            .await,
                        Ok(TxDecision::Commit)
                    ),
                    None => publisher.publish_together(&orders, None).await.is_ok(),
                };
                let done = Instant::now();
                let called = {
                    let mut called = local
                        .called
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    let first = called.remove(&order.order_token);
                    for other in &orders[1..] {
                        called.remove(&other.order_token);
                    }
                    first
                };
                if done < opens || done >= closes {
                    continue;
                }
                if !ok {
                    mine.errors += 1;
                    continue;
                }
                mine.sends += 1;
                mine.total_ms.push(ms(done - sent));
                if let Some(called) = called {
                    mine.half_ms
                        .push(ms(called.saturating_duration_since(sent)));
                    mine.end_ms.push(ms(done.saturating_duration_since(called)));
                }
            }
        });
    }
    tokio::time::sleep_until(opens.into()).await;
    let first = Reading::now(&args.watch);
    tokio::time::sleep_until(closes.into()).await;
    let cpu = Reading::now(&args.watch).since(&first);
    let mut all = Window::default();
    while let Some(mine) = workers.join_next().await {
        let Ok(mine) = mine else { continue };
        all.sends += mine.sends;
        all.errors += mine.errors;
        all.total_ms.extend(mine.total_ms);
        all.half_ms.extend(mine.half_ms);
        all.end_ms.extend(mine.end_ms);
    }
    (all, cpu)
}

fn orders_per_message(args: &SendsArgs) -> usize {
    args.orders_per_message.max(1)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// p50 and p99 (nearest rank); null without samples.
pub fn percentiles(mut samples: Vec<f64>) -> serde_json::Value {
    if samples.is_empty() {
        return serde_json::Value::Null;
    }
    samples.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        let r = (p / 100.0 * samples.len() as f64).ceil() as usize;
        samples[r.clamp(1, samples.len()) - 1]
    };
    json!({ "p50": rank(50.0), "p99": rank(99.0) })
}
