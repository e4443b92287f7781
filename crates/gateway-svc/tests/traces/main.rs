//! One purchase is one trace: the gateway's spans and the order consumer's, exported over
//! OTLP/HTTP to a receiver inside the test, share one trace id, joined through the
//! message's `traceparent`.
//!
//! A test binary of its own: the consumer runs in this process and installs the process's
//! one tracing subscriber (exporting as `order-consumer-svc`); the gateway is its real
//! binary, configured the standard way (`OTEL_EXPORTER_OTLP_ENDPOINT`), and flushes its
//! spans when SIGTERM stops it.
//!
//! Without an exporter there are no spans to see, but the trace id still ties a purchase's
//! log lines together across the services: the second test reads it from both binaries'
//! JSON logs.

#[allow(dead_code)]
#[path = "../api/helpers.rs"]
mod helpers;
mod otlp;

use std::time::Duration;

use domain::OrderToken;
use reqwest::StatusCode;
use serde_json::Value;
use test_support::process::ServiceProcess;
use test_support::service::InProcessService;
use test_support::stack::TestStack;

use crate::helpers::{TestApp, body};
use crate::otlp::{ReceivedSpan, Receiver};

const PRODUCT: u64 = 5;
const BUYER: u64 = 77;

fn find<'a>(spans: &'a [ReceivedSpan], service: &str, name: &str, trace: &str) -> &'a ReceivedSpan {
    spans
        .iter()
        .find(|s| s.service == service && s.name == name && s.trace_id == trace)
        .unwrap_or_else(|| panic!("no {service} span {name} in trace {trace}: {spans:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_purchase_is_one_trace_from_the_gateway_request_to_the_consumers_transaction() {
    let receiver = Receiver::start().await;
    let stack = TestStack::new().await;

    let consumer_settings: order_consumer_svc::Settings = stack.settings(&[
        ("SECKILL_TELEMETRY__OTLP_ENDPOINT", &receiver.base_url()),
        ("SECKILL_TELEMETRY__LOG_FILTER", "warn"),
    ]);
    let telemetry =
        platform::telemetry::init("order-consumer-svc", &consumer_settings.telemetry).unwrap();
    assert_eq!(
        telemetry.endpoint,
        Some(format!("{}/v1/traces", receiver.base_url()))
    );
    let consumer = InProcessService::start("consumer", move |shutdown, port| async move {
        let consumer = order_consumer_svc::Application::build(consumer_settings).await?;
        let _ = port.send(consumer.port());
        consumer.run_until_stopped(shutdown).await
    })
    .await;

    let mut env = stack.env();
    env.insert("OTEL_EXPORTER_OTLP_ENDPOINT".into(), receiver.base_url());
    env.insert("OTEL_BSP_SCHEDULE_DELAY".into(), "200".into());
    let gateway = ServiceProcess::start("gateway-svc", "SECKILL_GATEWAY__LISTEN", &env, &[]).await;

    let (_app, order_token) = buy_one_confirmed(stack, &gateway).await;

    // Flushed on the way out: the gateway on SIGTERM, the consumer when its guard drops.
    assert!(gateway.terminate().await.success());
    tokio::task::spawn_blocking(move || {
        consumer.stop().expect("the consumer stops cleanly");
        drop(telemetry);
    })
    .await
    .unwrap();

    let is_the_order = |s: &ReceivedSpan| {
        s.name == "consume_order" && s.attributes.get("seckill.order_token") == Some(&order_token)
    };
    let spans = receiver
        .wait_for(Duration::from_secs(30), |spans| {
            spans.iter().filter(|s| s.service == "gateway-svc").count() > 0
                && spans.iter().any(is_the_order)
        })
        .await;
    let trace = spans
        .iter()
        .find(|s| is_the_order(s))
        .unwrap()
        .trace_id
        .clone();
    let consumed_in = find(&spans, "order-consumer-svc", "consume_order", &trace);

    // The gateway's side of that trace, from the HTTP request down to confirm.lua.
    let request = find(
        &spans,
        "gateway-svc",
        "POST /api/v1/products/{product_id}/purchase",
        &trace,
    );
    assert_eq!(
        request.parent_span_id, "",
        "the request is the trace's root"
    );
    assert_eq!(
        request
            .attributes
            .get("http.response.status_code")
            .map(String::as_str),
        Some("202")
    );
    find(&spans, "gateway-svc", "purchase", &trace);
    find(&spans, "gateway-svc", "lua.pre_deduct", &trace);
    let send = find(&spans, "gateway-svc", "mq.send_half", &trace);
    assert_eq!(
        send.attributes.get("decision").map(String::as_str),
        Some("commit")
    );
    let local = find(&spans, "gateway-svc", "local_transaction", &trace);
    assert_eq!(local.parent_span_id, send.span_id, "{local:?}");
    let confirm = find(&spans, "gateway-svc", "lua.confirm", &trace);
    assert_eq!(confirm.parent_span_id, local.span_id);

    // The consumer's side: the batch (a child of the send) and its MySQL transaction.
    let batch = find(&spans, "order-consumer-svc", "consume_batch", &trace);
    assert_eq!(batch.parent_span_id, send.span_id, "{batch:?}");
    let transaction = find(&spans, "order-consumer-svc", "db.write_orders", &trace);
    assert_eq!(transaction.parent_span_id, batch.span_id);
    assert_eq!(consumed_in.parent_span_id, send.span_id);
    assert_eq!(consumed_in.links, vec![trace.clone()]);

    // Spans' fields (which log lines show too) name the order by its short form only.
    let short = order_token.parse::<OrderToken>().unwrap().short();
    for span in spans.iter().filter(|s| s.trace_id == trace) {
        if let Some(order) = span.attributes.get("order") {
            assert_eq!(order, &short, "{span:?}");
        }
    }
}

/// Opens a sale on `stack` and buys one unit through `gateway`; answers once the order is
/// confirmed, with its order token (and the app, which owns the stack).
async fn buy_one_confirmed(stack: TestStack, gateway: &ServiceProcess) -> (TestApp, String) {
    let app = TestApp {
        address: gateway.url(),
        client: reqwest::Client::new(),
        stack,
        consumer: None,
        gateway: None,
    };
    app.open_sale(PRODUCT, 5, 1).await;
    let bought = app.buy(BUYER, PRODUCT).await;
    assert_eq!(bought.status(), StatusCode::ACCEPTED);
    let order_token = body(bought).await["order_token"]
        .as_str()
        .expect("an order token")
        .to_owned();
    app.wait_confirmed(BUYER, &order_token, Duration::from_secs(30))
        .await;
    (app, order_token)
}

/// The JSON log lines of `path` whose message is `message`.
fn log_lines(path: &std::path::Path, message: &str) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["message"] == message)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_exporter_the_consumer_logs_the_order_under_the_purchases_trace_id() {
    let stack = TestStack::new().await;
    let mut env = stack.env();
    env.insert("LOG_FORMAT".into(), "json".into());
    env.insert("RUST_LOG".into(), "info".into());
    // Whatever the environment the test runs in says about an exporter.
    env.insert("OTEL_SDK_DISABLED".into(), "true".into());
    let gateway = ServiceProcess::start("gateway-svc", "SECKILL_GATEWAY__LISTEN", &env, &[]).await;
    let consumer =
        ServiceProcess::start("order-consumer-svc", "SECKILL_CONSUMER__LISTEN", &env, &[]).await;

    let (_app, order_token) = buy_one_confirmed(stack, &gateway).await;

    let queued = log_lines(gateway.log_path(), "Purchase queued.");
    let [queued] = queued.as_slice() else {
        panic!("one \"Purchase queued.\" line: {queued:?}");
    };
    assert_eq!(
        queued["order"],
        order_token.parse::<OrderToken>().unwrap().short().as_str(),
        "{queued}"
    );
    let trace = queued["trace_id"].as_str().expect("a trace id").to_owned();
    assert_eq!(trace.len(), 32, "{queued}");
    // The batch's line is written after the order is marked confirmed: wait for it.
    let written = test_support::eventually(
        Duration::from_secs(10),
        "the consumer's \"Order batch written.\" line",
        || async {
            let written = log_lines(consumer.log_path(), "Order batch written.");
            (!written.is_empty()).then_some(written)
        },
    )
    .await;
    let [written] = written.as_slice() else {
        panic!("one \"Order batch written.\" line: {written:?}");
    };
    assert_eq!(written["trace_id"], trace.as_str(), "{written}");
    assert_eq!(written["inserted"], 1, "{written}");
}
