//! A reconcile repair is a trace of its own that names the order token, and the consumer's
//! write of the re-published order joins it.
//!
//! A test binary of its own: the consumer runs in this process and installs the process's
//! one tracing subscriber (exporting as `order-consumer-svc`); reconcile is its real binary
//! (`reconcile-svc --once`, which flushes its spans before it exits). The OTLP receiver is
//! the gateway's test receiver.

#[allow(dead_code)]
#[path = "../reconcile/helpers.rs"]
mod helpers;
#[path = "../../../gateway-svc/tests/traces/otlp.rs"]
mod otlp;

use std::time::Duration;

use test_support::process::repo_root;

use crate::helpers::Sale;
use crate::otlp::{ReceivedSpan, Receiver};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_is_a_trace_of_its_own_named_for_its_order_and_the_consumer_joins_it() {
    let receiver = Receiver::start().await;
    let sale = Sale::open("1").await;
    let token = sale.reserve(7).await.to_string();

    let settings = sale.settings_with(&[
        ("SECKILL_TELEMETRY__OTLP_ENDPOINT", &receiver.base_url()),
        ("SECKILL_TELEMETRY__LOG_FILTER", "warn"),
    ]);
    let telemetry = platform::telemetry::init("order-consumer-svc", &settings.telemetry).unwrap();
    let consumer = sale.start_consumer(&[]).await;
    // Past the grace window: the flow is a missing order.
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_reconcile-svc"))
        .arg("--once")
        .envs(sale.stack.env())
        .env("SECKILL_RECONCILE__GRACE_SECS", "1")
        .env("SECKILL_CONFIG_DIR", repo_root().join("config"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.base_url())
        .output()
        .await
        .unwrap();
    let table = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    sale.wait_ordered(&token.parse().unwrap(), Duration::from_secs(30))
        .await;
    tokio::task::spawn_blocking(move || {
        consumer.stop().expect("the consumer stops cleanly");
        drop(telemetry);
    })
    .await
    .unwrap();

    let names = |s: &ReceivedSpan, name: &str| {
        s.name == name && s.attributes.get("seckill.order_token") == Some(&token)
    };
    let spans = receiver
        .wait_for(Duration::from_secs(30), |spans| {
            spans.iter().any(|s| names(s, "reconcile_repair"))
                && spans.iter().any(|s| names(s, "consume_order"))
        })
        .await;
    let repair = spans.iter().find(|s| names(s, "reconcile_repair")).unwrap();
    assert_eq!(repair.service, "reconcile-svc");
    assert_eq!(repair.parent_span_id, "", "a repair starts its own trace");
    let attribute = |key: &str| repair.attributes.get(key).map(String::as_str);
    assert_eq!(attribute("kind"), Some("missing_order"));
    assert_eq!(attribute("action"), Some("republish"));
    assert_eq!(attribute("outcome"), Some("repaired"));

    let in_trace = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name && s.trace_id == repair.trace_id)
            .unwrap_or_else(|| panic!("no {name} in the repair's trace: {spans:#?}"))
    };
    let publish = in_trace("mq.publish");
    assert_eq!(publish.parent_span_id, repair.span_id);
    let batch = in_trace("consume_batch");
    assert_eq!(batch.service, "order-consumer-svc");
    assert_eq!(batch.parent_span_id, publish.span_id);
    let order = in_trace("consume_order");
    assert!(names(order, "consume_order"));
    assert_eq!(
        order.links,
        vec![repair.trace_id.clone()],
        "linked to its batch"
    );
    in_trace("db.write_orders");

    // The run itself is another trace.
    let run_span = spans
        .iter()
        .find(|s| s.name == "reconcile_run")
        .expect("the run's span");
    assert_ne!(run_span.trace_id, repair.trace_id);
    assert_eq!(
        run_span.attributes.get("status").map(String::as_str),
        Some("repaired")
    );
}
