//! The operator's endpoints every service answers: `/healthz` (the process is alive),
//! `/readyz` (its dependencies answer) and `/metrics` (Prometheus text).

use std::future::Future;
use std::net::TcpListener;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{App, HttpResponse, HttpServer, web};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde_json::json;

type CheckFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// Probes the service's dependencies; `Err` names the one that did not answer.
pub type ReadinessCheck = Arc<dyn Fn() -> CheckFuture + Send + Sync>;

/// Wraps an async closure as a [`ReadinessCheck`].
pub fn readiness<F, Fut>(check: F) -> ReadinessCheck
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    Arc::new(move || Box::pin(check()))
}

/// Latency buckets (seconds) of every `_seconds` histogram without buckets of its own: from
/// a Redis round trip (sub-millisecond) to a send that waits out its timeout.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// From reservation to order row: a second when all is well, up to the DLQ's hours.
const ORDER_AGE_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];
/// A reconcile run: a second on a small sale, many minutes on millions of flows.
const RUN_BUCKETS: &[f64] = &[
    0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];
/// Messages per consumer batch (`consumer.batch_size` is 64 by default).
const BATCH_SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
/// From an order's row to its payment: up to the 900 s payment window
/// (`orders.payment_window_secs`), and one bucket past it, so that a payment taken after
/// the window shows as such rather than in +Inf.
const TIME_TO_PAY_BUCKETS: &[f64] = &[5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0];
/// From an order's `pay_by` to its expiry: a second or two when the deadline message comes
/// on time; 60 is `orders.expiry_grace_secs`, past which reconcile's sweep may expire it
/// first (the alert SeckillExpiriesBehind reads the p99 against it).
const EXPIRY_LAG_BUCKETS: &[f64] = &[0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0];

/// Every series a seckill service exports: (name, help). The HELP lines of `/metrics`, and
/// the list `make lint-observability` checks the dashboard, the alert rules and the code
/// against. Histograms come with buckets (`_bucket{le}`, `_sum`, `_count`), so Prometheus
/// computes any quantile across instances with `histogram_quantile`.
#[rustfmt::skip]
pub const SERIES: &[(&str, &str)] = &[
    // every service with a public API (the gateway)
    ("seckill_http_requests_total", "HTTP requests answered, by method, route and status."),
    ("seckill_http_request_duration_seconds", "Time to answer an HTTP request, by method and route."),
    // gateway-svc
    ("seckill_tokens_issued_total", "Purchase tokens issued."),
    ("seckill_purchases_total", "Purchases answered, by outcome (accepted, sold_out, duplicate, limit_exceeded, sale_not_open, invalid_token, not_loaded, rolled_back, send_failed, unconfirmed, unanswered, bad_request)."),
    ("seckill_purchases_unheard_total", "Purchases that ran to their end after the buyer's connection was gone, by outcome (accepted, refused)."),
    ("seckill_rate_limited_total", "Requests refused by a rate limit, by scope (global, user, in_flight: rate_limit.purchases_in_flight purchases were under way)."),
    ("seckill_purchases_in_flight", "Purchases under way in this gateway (on their way to Redis and the broker), sampled once a second."),
    ("seckill_sold_out_flag", "1 while this gateway holds the local sold-out flag of a product, else 0."),
    ("seckill_lua_seconds", "Time of one Lua script call to Redis, by script (pre_deduct, confirm, release)."),
    ("seckill_send_seconds", "Time of one transactional send: the half message and the local transaction."),
    ("seckill_orders_per_message", "Orders carried by one transactional message (the gateway gathers the winners of the same moment into one send)."),
    ("seckill_releases_total", "release.lua calls of the purchase path, by outcome and reason (send_failed, pre_deduct_unanswered)."),
    ("seckill_orders_sent_plain_total", "Committed orders the gateway also sent as a plain message after its local transaction gave no answer, by outcome (stored, failed)."),
    ("seckill_withdrawals_in_background_total", "Purchases answered 503 whose token Redis had not yet taken back: the gateway goes on giving it back in the background."),
    ("seckill_withdrawals_late_total", "Background give-backs of a purchase answered 503, by how they ended (withdrawn, committed, gave_up); committed and gave_up need an operator."),
    ("seckill_checkbacks_total", "Local transactions (kind=local) and broker check-backs (kind=check_back), by answer (commit, rollback, unknown)."),
    ("seckill_stock_left", "Units left for sale per product, as last seen in a store (store=redis or mysql)."),
    ("seckill_order_watchers", "Order event streams (SSE) and long-polls open on this gateway (orders.max_watchers at most)."),
    // after the purchase: every process that ends orders or takes payments (order-lifecycle)
    ("seckill_orders_ended_total", "Confirmed orders ended unpaid, by status (cancelled, expired), counted by the process whose conditional write in MySQL ended it: each order once across processes."),
    ("seckill_units_returned_total", "Ended orders whose units this process put back on sale in Redis, by why (cancelled, expired); each order's units go back once, whoever returns them."),
    ("seckill_payments_total", "Payment callbacks, by outcome (paid; refund_due: the order was already cancelled, expired or paid by another payment, money to give back; amount_mismatch: not price x quantity, nothing recorded; unknown_order: no such order in MySQL, nothing recorded). A callback the provider repeats counts again."),
    ("seckill_time_to_pay_seconds", "From an order's row written in MySQL to its payment (the provider's paid_at), per callback answered paid (a repeated one again)."),
    // order-consumer-svc
    ("seckill_consumer_batch_size", "Messages per batch handed to the order writer."),
    ("seckill_order_backlog_messages", "Order messages the consumer group has still to consume, as the broker counts them (read every consumer.backlog_export_secs; every consumer exports the same figure)."),
    ("seckill_order_backlog_orders", "The order backlog in orders: the messages still to consume times the mean orders per message of this consumer's recent batches (the KEDA trigger's figure)."),
    ("seckill_order_backlog_probe_failures_total", "Failed readings of the order backlog from the broker (the backlog gauges then keep their last value)."),
    ("seckill_consumer_batch_seconds", "Time to write one batch: the MySQL transaction and the Redis confirmation."),
    ("seckill_consumer_redeliveries_total", "Messages received again after an earlier failure (reconsume times > 0)."),
    ("seckill_consumer_rejected_total", "Messages that can never be an order, recorded in rejected_message and acknowledged."),
    ("seckill_consumer_unwritable_total", "Orders MySQL refuses as they stand (stock short of what Redis sold, or no stock row), recorded in unwritable_order and set aside; reconcile reports them unresolved."),
    ("seckill_consumer_batch_failures_total", "Batches handed back to the broker, by whether the failure is retryable."),
    ("seckill_consumer_dead_lettered_total", "Messages handed back for the last time: the broker moves them to the DLQ (%DLQ%<group>)."),
    ("seckill_orders_written_total", "Order rows inserted (with their stock deducted)."),
    ("seckill_orders_duplicate_total", "Messages for orders already written (redelivery, re-publish): nothing done."),
    ("seckill_consumer_order_age_seconds", "From the reservation in Redis to the order row in MySQL: the queue's delay, the consumer's lag in time."),
    ("seckill_consumer_last_batch_timestamp_seconds", "Unix time of the last batch written."),
    ("seckill_deadlines_scheduled_total", "Deadline messages (the broker's timer messages that expire an unpaid order at its pay_by) sent for written orders, by outcome (sent, failed: the broker did not take it)."),
    ("seckill_expiry_lag_seconds", "From an order's pay_by to its expiry by this consumer's expirer (on its deadline message): how late unpaid orders give their units back."),
    // reconcile-svc
    ("seckill_reconcile_runs_total", "Reconcile runs, by final status (clean, repaired, unresolved, failed)."),
    ("seckill_reconcile_discrepancies_total", "Discrepancies found, by kind (missing_order, stock_not_deducted, orphan_order, redis_drift, mysql_drift, overdue_unexpired, unit_not_returned, returned_while_open, paid_but_released)."),
    ("seckill_reconcile_repairs_total", "What was done about each discrepancy, by action and outcome."),
    ("seckill_reconcile_unresolved", "Discrepancies the last run left for a person."),
    ("seckill_reconcile_drift_units", "Stock drift per product and store found by the last run (0: the totals add up)."),
    ("seckill_reconcile_last_run_timestamp_seconds", "Unix time the last run finished."),
    ("seckill_reconcile_run_seconds", "Duration of a reconcile run."),
    ("seckill_refunds_due", "Payments recorded refund_due per product (they came for an order already ended: money to give back), as the last reconcile run counted them; refunds already made included."),
];

/// `seckill_stock_left{product_id, store}`: units left for sale in `store` ("redis" or
/// "mysql"), as this process last saw them. Several processes report it; the dashboard
/// takes the lowest per product and store (stock only falls while a sale runs).
pub fn record_stock(product_id: u64, store: &'static str, units: i64) {
    metrics::gauge!(
        "seckill_stock_left",
        "product_id" => product_id.to_string(),
        "store" => store
    )
    .set(units as f64);
}

/// How often the recorder's histograms are drained ([`metrics_handle`]).
const UPKEEP_EVERY: Duration = Duration::from_secs(1);

/// The process-wide Prometheus recorder. Installed once: several services may share a
/// process in tests, and the `metrics` facade has a single global recorder.
///
/// A histogram of this recorder keeps every sample it is given (24 bytes: the value and
/// when) until an upkeep drains them into its buckets, and `install_recorder` leaves the
/// upkeep to the caller. Only a scrape ran it, so between scrapes the gateway kept 48 bytes
/// per request (two histograms) — hundreds of MiB after a few million unscraped requests,
/// which the allocator then kept as RSS (BENCHMARKS.md §6). A thread of its own drains them
/// every [`UPKEEP_EVERY`]: whatever runtime the service has, and none in a test process.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = prometheus_builder()
                .install_recorder()
                .expect("no other metrics recorder is installed");
            for (name, help) in SERIES {
                metrics::describe_counter!(*name, *help);
            }
            let upkeep = handle.clone();
            std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_EVERY);
                        upkeep.run_upkeep();
                    }
                })
                .expect("a thread can be started at start-up");
            handle
        })
        .clone()
}

/// Histograms with buckets rather than summaries: summaries cannot be aggregated across
/// instances, and the dashboard's p99 is `histogram_quantile` over them.
fn prometheus_builder() -> PrometheusBuilder {
    let buckets = |builder: PrometheusBuilder, matcher: Matcher, values: &[f64]| {
        builder
            .set_buckets_for_metric(matcher, values)
            .expect("bucket lists are not empty")
    };
    // Full matchers take precedence over the suffix one.
    let builder = buckets(
        PrometheusBuilder::new(),
        Matcher::Suffix("_seconds".into()),
        LATENCY_BUCKETS,
    );
    let builder = buckets(
        builder,
        Matcher::Full("seckill_consumer_order_age_seconds".into()),
        ORDER_AGE_BUCKETS,
    );
    let builder = buckets(
        builder,
        Matcher::Full("seckill_reconcile_run_seconds".into()),
        RUN_BUCKETS,
    );
    let builder = buckets(
        builder,
        Matcher::Full("seckill_time_to_pay_seconds".into()),
        TIME_TO_PAY_BUCKETS,
    );
    let builder = buckets(
        builder,
        Matcher::Full("seckill_expiry_lag_seconds".into()),
        EXPIRY_LAG_BUCKETS,
    );
    let builder = buckets(
        builder,
        Matcher::Full("seckill_consumer_batch_size".into()),
        BATCH_SIZE_BUCKETS,
    );
    buckets(
        builder,
        Matcher::Full("seckill_orders_per_message".into()),
        BATCH_SIZE_BUCKETS,
    )
}

#[derive(Clone)]
pub struct OpsState {
    pub ready: ReadinessCheck,
    pub metrics: PrometheusHandle,
}

/// Mounts the three endpoints into an actix-web app.
pub fn configure(cfg: &mut web::ServiceConfig, state: OpsState) {
    configure_probes(cfg, state);
    cfg.route("/metrics", web::get().to(render_metrics));
}

/// Mounts `/healthz` and `/readyz` only: for a server that answers the public, where the
/// kubelet still probes but `/metrics` is not to be read.
pub fn configure_probes(cfg: &mut web::ServiceConfig, state: OpsState) {
    cfg.app_data(web::Data::new(state))
        .route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz));
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "alive"}))
}

async fn readyz(state: web::Data<OpsState>) -> HttpResponse {
    match (state.ready)().await {
        Ok(()) => HttpResponse::Ok().json(json!({"status": "ready"})),
        Err(reason) => HttpResponse::ServiceUnavailable().json(json!({
            "error": {"code": "UNAVAILABLE", "message": reason}
        })),
    }
}

async fn render_metrics(state: web::Data<OpsState>) -> HttpResponse {
    state.metrics.run_upkeep();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}

/// A small server with the ops endpoints and whatever `extra` mounts, for the services
/// that serve no public API. Returns the bound port (so tests can ask for port 0) and the
/// running server.
pub fn serve<F>(
    listen: &str,
    state: OpsState,
    extra: F,
) -> std::io::Result<(u16, Server, ServerHandle)>
where
    F: Fn(&mut web::ServiceConfig) + Clone + Send + 'static,
{
    let listener = TcpListener::bind(listen)?;
    let port = listener.local_addr()?.port();
    let server = HttpServer::new(move || {
        App::new()
            .configure(|cfg| configure(cfg, state.clone()))
            .configure(extra.clone())
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run();
    let handle = server.handle();
    Ok((port, server, handle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_render_with_buckets_not_quantiles() {
        let recorder = prometheus_builder().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            metrics::histogram!("seckill_send_seconds").record(0.003);
            metrics::histogram!("seckill_consumer_batch_size").record(10.0);
            metrics::histogram!("seckill_reconcile_run_seconds").record(42.0);
        });
        let text = handle.render();
        assert!(
            text.contains("seckill_send_seconds_bucket{le=\"0.005\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("seckill_consumer_batch_size_bucket{le=\"16\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("seckill_reconcile_run_seconds_bucket{le=\"60\"} 1"),
            "{text}"
        );
        assert!(!text.contains("quantile="), "{text}");
    }

    #[test]
    fn series_names_follow_the_prometheus_conventions() {
        for (name, help) in SERIES {
            assert!(name.starts_with("seckill_"), "{name}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}"
            );
            assert!(!help.is_empty(), "{name}");
            // Units are base units, spelt out: no _ms, _millis, _bytes_total mix-ups.
            assert!(!name.contains("_ms") && !name.contains("millis"), "{name}");
        }
    }
}
