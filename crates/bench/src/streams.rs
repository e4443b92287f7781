//! `streams`: what thousands of open order-event streams cost a gateway, how fast a change
//! reaches them, and how fast a returned unit sells again where the product was sold out.
//!
//! A product of `--orders` units is sold to as many buyers (each order confirmed in MySQL),
//! and one buyer more is refused `SOLD_OUT`, which sets the gateway's sold-out flag. Then
//! `--count` streams (`GET /api/v1/orders/{token}/events`, spread over the orders) are opened
//! and held; the gateway's VmRSS is read before and while they are open. Every order is
//! then cancelled at once: each stream's delay is from its order's cancel being sent to the
//! `cancelled` event arriving, and the extra buyer tries again until a returned unit is
//! sold to them, which measures how fast the sold-out flag learns of a return (the
//! gateway's pub/sub follower clears it; its epoch check would take up to a second).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use sale_sim::gateway::{Gateway, Refusal};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::conns::{CONNECT_BATCH, find, memory, socket_count};

pub struct StreamsArgs<'a> {
    pub addr: &'a str,
    pub admin_token: &'a str,
    pub pid: u32,
    pub product: u64,
    pub orders: usize,
    pub count: usize,
}

/// How long a stream may take to show the cancel before it counts as missed.
const DELIVERY_LIMIT: Duration = Duration::from_secs(10);
/// How long the extra buyer keeps trying before the sold-out flag counts as stuck.
const RESALE_LIMIT: Duration = Duration::from_secs(10);
/// The buyers of the sale are users 1..=orders; the one refused at sell-out comes after.
const FIRST_USER: u64 = 1;

pub async fn run(args: &StreamsArgs<'_>) -> anyhow::Result<()> {
    let gateway = Gateway::new(
        &format!("http://{}", args.addr),
        args.admin_token,
        Duration::from_secs(1),
    )?;
    let orders = sell_out(&gateway, args).await?;
    let late_buyer = FIRST_USER + orders.len() as u64;
    match buy(&gateway, args.product, late_buyer).await {
        Err(refusal) if refusal.code == "SOLD_OUT" => {}
        other => bail!("the buyer after the sell-out was not refused SOLD_OUT: {other:?}"),
    }

    let before = memory(args.pid)?;
    let (cancel_sent, cancel_sent_rx) = watch::channel(None::<Instant>);
    let cancel_sent_rx = Arc::new(cancel_sent_rx);
    let started = Instant::now();
    let mut streams = JoinSet::new();
    let mut opened = 0;
    while opened < args.count {
        let mut batch = JoinSet::new();
        for index in opened..(opened + CONNECT_BATCH).min(args.count) {
            let (user, token) = orders[index % orders.len()].clone();
            let addr = args.addr.to_owned();
            batch.spawn(async move { open_stream(&addr, user, &token).await });
        }
        while let Some(stream) = batch.join_next().await {
            let stream = stream.context("a stream task panicked")??;
            let mut sent = (*cancel_sent_rx).clone();
            streams.spawn(async move { await_cancelled(stream, &mut sent).await });
            opened += 1;
        }
    }
    let opened_ms = started.elapsed().as_millis();
    let open = memory(args.pid)?;
    let sockets = socket_count(args.pid);

    // All cancels at once; every stream times its delay from the moment they were sent.
    let now = Instant::now();
    cancel_sent.send_replace(Some(now));
    let mut cancels = JoinSet::new();
    for (user, token) in orders.iter().cloned() {
        let gateway = gateway.clone();
        cancels.spawn(async move { gateway.cancel(user, &token).await });
    }
    let resale = tokio::spawn({
        let gateway = gateway.clone();
        let product = args.product;
        async move { first_resale(&gateway, product, late_buyer, now).await }
    });
    while let Some(cancel) = cancels.join_next().await {
        cancel
            .context("a cancel task panicked")?
            .map_err(|refusal| anyhow!("a cancel was refused: {refusal:?}"))?;
    }
    let mut delays_ms = Vec::with_capacity(args.count);
    let mut missed = 0;
    let mut ended = 0;
    while let Some(outcome) = streams.join_next().await {
        match outcome.context("a stream task panicked")? {
            Some(seen) => {
                delays_ms.push(seen.delay.as_secs_f64() * 1000.0);
                ended += usize::from(seen.ended);
            }
            None => missed += 1,
        }
    }
    let resale_ms = resale.await.context("the resale task panicked")??;
    let after = memory(args.pid)?;
    delays_ms.sort_by(f64::total_cmp);
    let per_stream_kib = (open.rss_kib.saturating_sub(before.rss_kib)) as f64 / args.count as f64;
    println!(
        "{}",
        json!({
            "streams": args.count,
            "orders": orders.len(),
            "opened_ms": opened_ms,
            "server_sockets": sockets,
            "rss_before_kib": before.rss_kib,
            "rss_open_kib": open.rss_kib,
            "rss_after_kib": after.rss_kib,
            "hwm_kib": after.hwm_kib,
            "kib_per_stream": per_stream_kib,
            "delivered": delays_ms.len(),
            "missed": missed,
            "ended_after_final": ended,
            "delivery_ms_p50": percentile(&delays_ms, 0.50),
            "delivery_ms_p99": percentile(&delays_ms, 0.99),
            "delivery_ms_max": delays_ms.last().copied(),
            "sold_again_after_ms": resale_ms,
        })
    );
    Ok(())
}

/// Puts the product on sale with one unit per order and buys them all, one buyer each;
/// returns each buyer with their order once MySQL has written it (`confirmed`).
async fn sell_out(gateway: &Gateway, args: &StreamsArgs<'_>) -> anyhow::Result<Vec<(u64, String)>> {
    gateway
        .put_product(args.product, args.orders as i64, 1, Some(100))
        .await
        .map_err(|refusal| anyhow!("the product could not be put on sale: {refusal:?}"))?;
    let mut buys = JoinSet::new();
    for user in FIRST_USER..FIRST_USER + args.orders as u64 {
        let gateway = gateway.clone();
        let product = args.product;
        buys.spawn(async move {
            let token = buy(&gateway, product, user).await?;
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                match gateway.order_change(user, &token, 5).await {
                    Ok(order) if order.status == "confirmed" => return Ok((user, token)),
                    _ if Instant::now() > deadline => {
                        return Err(Refusal {
                            status: None,
                            code: "NOT_CONFIRMED".into(),
                            message: format!("order {token} not confirmed within 30 s"),
                        });
                    }
                    _ => {}
                }
            }
        });
    }
    let mut orders = Vec::with_capacity(args.orders);
    while let Some(order) = buys.join_next().await {
        orders.push(
            order
                .context("a buyer task panicked")?
                .map_err(|refusal| anyhow!("a buyer of the sale failed: {refusal:?}"))?,
        );
    }
    Ok(orders)
}

async fn buy(gateway: &Gateway, product: u64, user: u64) -> Result<String, Refusal> {
    let token = gateway.issue_token(product, user).await?.token;
    Ok(gateway.purchase(product, user, &token).await?.order_token)
}

/// Milliseconds from `since` until the buyer's purchase is accepted.
async fn first_resale(
    gateway: &Gateway,
    product: u64,
    user: u64,
    since: Instant,
) -> anyhow::Result<f64> {
    loop {
        match buy(gateway, product, user).await {
            Ok(_) => return Ok(since.elapsed().as_secs_f64() * 1000.0),
            Err(refusal) if refusal.code == "SOLD_OUT" && since.elapsed() < RESALE_LIMIT => {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err(refusal) => bail!("the returned unit did not sell again: {refusal:?}"),
        }
    }
}

/// Opens the order's event stream and reads until its first event (the order as it is).
async fn open_stream(addr: &str, user: u64, token: &str) -> anyhow::Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!(
        "GET /api/v1/orders/{token}/events HTTP/1.1\r\nHost: bench\r\nX-User-Id: {user}\r\n\
         Accept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut seen = Vec::with_capacity(1024);
    let mut buf = [0_u8; 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            bail!(
                "the stream closed before its first event: {}",
                String::from_utf8_lossy(&seen)
            );
        }
        seen.extend_from_slice(&buf[..n]);
        if !seen.starts_with(b"HTTP/1.1 200") && seen.len() >= 12 {
            bail!("the stream was refused: {}", String::from_utf8_lossy(&seen));
        }
        if contains(&seen, b"\"status\":\"confirmed\"") {
            return Ok(stream);
        }
    }
}

struct Seen {
    delay: Duration,
    /// The stream ended (its last chunk came) after the final status.
    ended: bool,
}

/// Reads the stream until it shows `cancelled` and ends; `None` when it did not show it
/// within the limit.
async fn await_cancelled(
    mut stream: TcpStream,
    cancel_sent: &mut watch::Receiver<Option<Instant>>,
) -> Option<Seen> {
    let mut seen = Vec::with_capacity(1024);
    let mut buf = [0_u8; 1024];
    let mut delay = None;
    loop {
        let read = match *cancel_sent.borrow() {
            Some(sent) => sent + DELIVERY_LIMIT,
            None => Instant::now() + Duration::from_secs(3600),
        };
        let n = tokio::select! {
            n = stream.read(&mut buf) => n.ok()?,
            () = tokio::time::sleep_until(read.into()) => {
                return delay.map(|delay| Seen { delay, ended: false });
            }
            changed = cancel_sent.changed(), if cancel_sent.borrow().is_none() => {
                changed.ok()?;
                continue;
            }
        };
        if n == 0 {
            return delay.map(|delay| Seen { delay, ended: true });
        }
        seen.extend_from_slice(&buf[..n]);
        if delay.is_none() && contains(&seen, b"\"status\":\"cancelled\"") {
            let sent = (*cancel_sent.borrow())?;
            delay = Some(sent.elapsed());
        }
        // The chunked body's last chunk: the server ended the stream.
        if delay.is_some() && seen.ends_with(b"0\r\n\r\n") {
            return delay.map(|delay| Seen { delay, ended: true });
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}
