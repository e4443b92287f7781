//! The consumer's side: a product to write orders against, a backlog of queued order
//! messages, the raw batched SQL the consumer is compared with, and the timed drain of the
//! backlog by order-consumer-svc itself.
//!
//! Progress of a drain is read from `product_stock.stock` (a primary-key read; every order
//! takes one unit), not from `COUNT(*)` over the orders, which would itself load MariaDB
//! while it is being measured.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use deadpool_redis::redis;
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use domain::{OrderPlaced, OrderToken, ProductId, UserId};
use order_queue::{LocalTransaction, MqRuntime, OrderPublisher, TxDecision};
use order_store::{Db, NewProduct};
use secrecy::ExposeSecret;
use serde_json::json;
use stock_cache::StockCache;
use tokio::task::JoinSet;

use crate::cpu::Reading;
use crate::settings::Settings;

/// Databases this tool may drop: its own, never the services' or the tests'.
const OWN_DATABASES: &str = "seckill_bench";

const POLL: Duration = Duration::from_millis(50);

pub async fn prepare_product(
    settings: &Settings,
    product: ProductId,
    stock: i64,
    fresh: bool,
) -> anyhow::Result<()> {
    let url = settings.mysql.url.expose_secret();
    if fresh {
        let (server, database) = order_store::split_database_url(url)?;
        let database = database.context("the MySQL URL names no database")?;
        ensure!(
            database.starts_with(OWN_DATABASES),
            "--fresh drops the database: only one named {OWN_DATABASES}* (not {database})"
        );
        let mut conn = AsyncMysqlConnection::establish(&server).await?;
        diesel::sql_query(format!("DROP DATABASE IF EXISTS `{database}`"))
            .execute(&mut conn)
            .await?;
    }
    order_store::create_database(url).await?;
    order_store::migrate(url).await?;
    let db = Db::connect(url, 1)?;
    db.put_product(
        &NewProduct {
            id: product,
            name: "bench".into(),
            initial_stock: stock,
            per_user_limit: 1,
            starts_at: None,
            ends_at: None,
        },
        true,
    )
    .await?;
    db.close();
    Ok(())
}

fn order(product: ProductId, n: u64, now_ms: i64) -> OrderPlaced {
    OrderPlaced::new(
        OrderToken::new(product, u128::from(n)),
        UserId(n + 1),
        1,
        now_ms,
    )
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Commits at once, as the gateway's confirm.lua does for flows it holds: messages of
/// several orders are queued the gateway's way, as transactional messages.
struct CommitAll;

impl LocalTransaction for CommitAll {
    fn execute(&self, _orders: &[OrderPlaced], _: &tracing::Span) -> TxDecision {
        TxDecision::Commit
    }
    fn check(&self, _order_tokens: &[OrderToken]) -> TxDecision {
        TxDecision::Commit
    }
}

/// Queues `count` orders: plain messages of one order each, or with `per_message` > 1
/// transactional messages of that many (what the gateway sends under a crowd).
pub async fn publish(
    settings: &Settings,
    product: ProductId,
    count: u64,
    concurrency: usize,
    per_message: u64,
) -> anyhow::Result<()> {
    let per_message = per_message.max(1);
    let runtime = MqRuntime::new("bench-publish", 16)?;
    order_queue::ensure_topic(&runtime, &settings.rocketmq)
        .await
        .context("cannot create the topic")?;
    let publisher =
        OrderPublisher::start(&runtime, &settings.rocketmq, Arc::new(CommitAll)).await?;
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let reserved_at = now_ms();
    let mut workers = JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (publisher, next) = (publisher.clone(), next.clone());
        workers.spawn(async move {
            loop {
                let first = next.fetch_add(per_message, Ordering::Relaxed);
                if first >= count {
                    return anyhow::Ok(());
                }
                let orders: Vec<OrderPlaced> = (first..count.min(first + per_message))
                    .map(|n| order(product, n, reserved_at))
                    .collect();
                let mut tries = 0;
                while let Err(error) = send(&publisher, &orders).await {
                    tries += 1;
                    if tries >= 5 {
                        return Err(error).context("publish failed 5 times");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.context("a publisher task panicked")??;
    }
    let seconds = started.elapsed().as_secs_f64();
    publisher.shutdown().await;
    runtime.shutdown().await;
    println!(
        "{}",
        json!({
            "published": count,
            "orders_per_message": per_message,
            "seconds": seconds,
            "sends_per_sec": count.div_ceil(per_message) as f64 / seconds,
        })
    );
    Ok(())
}

async fn send(publisher: &OrderPublisher, orders: &[OrderPlaced]) -> anyhow::Result<()> {
    if let [order] = orders {
        return Ok(publisher.publish(order, None).await?);
    }
    match publisher
        .send_in_transaction(orders.to_vec(), tracing::Span::none())
        .await?
    {
        TxDecision::Commit => Ok(()),
        other => anyhow::bail!("the local transaction answered {other:?}"),
    }
}

pub async fn write(
    settings: &Settings,
    product: ProductId,
    count: u64,
    batch: usize,
    tasks: usize,
    watch: &[(String, u32)],
) -> anyhow::Result<()> {
    let url = settings.mysql.url.expose_secret();
    let db = Db::connect(url, tasks.max(1))?;
    let batch = batch.max(1) as u64;
    let next = Arc::new(AtomicU64::new(0));
    let reserved_at = now_ms();
    let started = Instant::now();
    let cpu_start = Reading::now(watch);
    let mut workers = JoinSet::new();
    for _ in 0..tasks.max(1) {
        let (db, next) = (db.clone(), next.clone());
        workers.spawn(async move {
            loop {
                let first = next.fetch_add(batch, Ordering::Relaxed);
                if first >= count {
                    return anyhow::Ok(());
                }
                let orders: Vec<OrderPlaced> = (first..(first + batch).min(count))
                    .map(|n| order(product, n, reserved_at))
                    .collect();
                db.write_orders(&orders).await?;
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.context("a writer task panicked")??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = Reading::now(watch).since(&cpu_start);
    let written = db.order_count(product).await?;
    ensure!(
        written == i64::try_from(count)?,
        "{written} orders in MySQL, {count} written"
    );
    db.close();
    println!(
        "{}",
        json!({
            "orders": count,
            "batch": batch,
            "tasks": tasks,
            "seconds": seconds,
            "orders_per_sec": count as f64 / seconds,
            "cores": cpu["cores"],
            "switches": cpu["switches"],
        })
    );
    Ok(())
}

pub struct DrainWatch {
    pub consumer: PathBuf,
    pub product: ProductId,
    pub orders: i64,
    pub pid_file: Option<PathBuf>,
    pub log: PathBuf,
    pub timeout: Duration,
    /// Processes whose CPU use over the drain is reported, beside the consumer's.
    pub watch: Vec<(String, u32)>,
}

pub async fn drain(settings: &Settings, watch: &DrainWatch) -> anyhow::Result<()> {
    let url = settings.mysql.url.expose_secret();
    let db = Db::connect(url, 1)?;
    let initial = db
        .stock(watch.product)
        .await?
        .context("the product is not in MySQL: prepare-product first")?;
    let log = std::fs::File::create(&watch.log)
        .with_context(|| format!("cannot create {}", watch.log.display()))?;
    let started = Instant::now();
    let mut child = tokio::process::Command::new(&watch.consumer)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", watch.consumer.display()))?;
    let pid = child.id().context("the consumer has no pid")?;
    if let Some(pid_file) = &watch.pid_file {
        std::fs::write(pid_file, pid.to_string())?;
    }
    let mut watched = watch.watch.clone();
    watched.push(("consumer".to_owned(), pid));
    let mut first: Option<(Instant, i64, Reading)> = None;
    let (done, cpu_done) = loop {
        if let Some(status) = child.try_wait()? {
            bail!(
                "the consumer exited early ({status}); see {}",
                watch.log.display()
            );
        }
        let written = initial - db.stock(watch.product).await?.unwrap_or(initial);
        let now = Instant::now();
        if written > 0 && first.is_none() {
            first = Some((now, written, Reading::now(&watched)));
        }
        if written >= watch.orders {
            break (now, Reading::now(&watched));
        }
        if started.elapsed() > watch.timeout {
            bail!(
                "{written} of {} orders written after {:?}",
                watch.orders,
                watch.timeout
            );
        }
        tokio::time::sleep(POLL).await;
    };
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    let stopped = tokio::time::timeout(Duration::from_secs(40), child.wait()).await;
    if stopped.is_err() {
        child.kill().await?;
    }
    let orders = db.order_count(watch.product).await?;
    ensure!(
        orders == watch.orders,
        "{orders} orders in MySQL for {} messages",
        watch.orders
    );
    db.close();
    forget_confirmations(settings, watch.product).await?;
    let (first_at, first_count, cpu_first) = first.unwrap_or((done, 0, cpu_done.clone()));
    let drain = done.duration_since(first_at).as_secs_f64();
    let cpu = cpu_done.since(&cpu_first);
    println!(
        "{}",
        json!({
            "orders": watch.orders,
            "start_to_first_order_s": first_at.duration_since(started).as_secs_f64(),
            "drain_s": drain,
            "total_s": done.duration_since(started).as_secs_f64(),
            "orders_per_sec": if drain > 0.0 { (watch.orders - first_count) as f64 / drain } else { 0.0 },
            "cores": cpu["cores"],
            "switches": cpu["switches"],
        })
    );
    Ok(())
}

/// The consumer marks every order confirmed in Redis; those marks are the bench's litter.
async fn forget_confirmations(settings: &Settings, product: ProductId) -> anyhow::Result<()> {
    let redis = &settings.redis;
    let keys =
        StockCache::new(&redis.url, 1, &redis.key_prefix, Duration::from_secs(10))?.keys(product);
    let client = redis::Client::open(redis.url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let () = redis::cmd("UNLINK")
        .arg(&keys.result)
        .query_async(&mut conn)
        .await?;
    Ok(())
}
