//! Every service's `/metrics` after a small sale: the series the dashboard and the alert
//! rules read are there, in Prometheus text, histograms with buckets. The recorder is one
//! per process, so counters add up across the tests running beside this one: exact values
//! are checked only on series labelled with this test's own product.

use std::time::{Duration, Instant};

use domain::{OrderToken, PreDeductOutcome, ProductId, UserId};
use reqwest::StatusCode;
use test_support::process::free_port;
use test_support::service::InProcessService;

use crate::helpers::{body, spawn_app_with_consumer_and};

/// A product id no other test uses: its labelled series are this test's alone.
const PRODUCT: u64 = 424_242;

async fn scrape(client: &reqwest::Client, base: &str) -> String {
    let response = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    response.text().await.unwrap()
}

/// The value of the first sample whose name and labels start with `prefix`.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

fn assert_series(text: &str, prefixes: &[&str]) {
    for prefix in prefixes {
        assert!(sample(text, prefix).is_some(), "no {prefix} in:\n{text}");
    }
}

fn assert_histograms(text: &str, names: &[&str]) {
    for name in names {
        assert!(
            text.contains(&format!("# TYPE {name} histogram")),
            "{name} is not a histogram in:\n{text}"
        );
        assert_series(text, &[&format!("{name}_bucket"), &format!("{name}_count")]);
    }
}

#[tokio::test]
async fn every_service_exports_its_series_after_a_small_sale() {
    // A burst of two per buyer: a token and a purchase, then the third request is refused.
    let app = spawn_app_with_consumer_and(&[
        ("SECKILL_RATE_LIMIT__USER_PER_SEC", "1"),
        ("SECKILL_RATE_LIMIT__USER_BURST", "2"),
    ])
    .await;
    app.open_sale(PRODUCT, 3, 1).await;
    let mut tokens = Vec::new();
    for buyer in [1, 2] {
        let response = app.buy(buyer, PRODUCT).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        tokens.push((
            buyer,
            body(response).await["order_token"]
                .as_str()
                .unwrap()
                .to_owned(),
        ));
    }
    assert_eq!(
        app.request_token(1, PRODUCT).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // The last unit is reserved behind the gateway's back and never sent: a missing order
    // for reconcile once the grace window (2 s in tests) has passed.
    let lost = OrderToken::random(ProductId(PRODUCT));
    let reserved = app
        .stack
        .redis
        .cache()
        .pre_deduct(&lost, UserId(99), 1)
        .await
        .unwrap();
    assert!(matches!(
        reserved,
        PreDeductOutcome::Reserved { stock_after: 0 }
    ));
    assert_eq!(app.buy(3, PRODUCT).await.status(), StatusCode::CONFLICT);
    for (buyer, token) in &tokens {
        app.wait_confirmed(*buyer, token, Duration::from_secs(30))
            .await;
    }
    app.admin_view(PRODUCT).await;

    let client = &app.client;
    let gateway = scrape(client, &app.address).await;
    let p = format!("product_id=\"{PRODUCT}\"");
    assert_series(
        &gateway,
        &[
            "seckill_tokens_issued_total",
            "seckill_purchases_total{outcome=\"accepted\"}",
            "seckill_purchases_total{outcome=\"sold_out\"}",
            "seckill_rate_limited_total{scope=\"user\"}",
            "seckill_checkbacks_total{kind=\"local\",answer=\"commit\"}",
            "seckill_http_requests_total{method=\"POST\",route=\"/api/v1/products/{product_id}/purchase\",status=\"202\"}",
            "seckill_http_requests_total{method=\"POST\",route=\"/api/v1/products/{product_id}/tokens\",status=\"429\"}",
        ],
    );
    assert_histograms(
        &gateway,
        &[
            "seckill_lua_seconds",
            "seckill_send_seconds",
            "seckill_http_request_duration_seconds",
        ],
    );
    assert_series(
        &gateway,
        &["seckill_lua_seconds_bucket{script=\"pre_deduct\",le=\"0.001\"}"],
    );
    assert_eq!(
        sample(&gateway, &format!("seckill_sold_out_flag{{{p}}}")),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &gateway,
            &format!("seckill_stock_left{{{p},store=\"redis\"}}")
        ),
        Some(0.0)
    );
    // Read by the admin view: one unit is only reserved, so MySQL still has it.
    assert_eq!(
        sample(
            &gateway,
            &format!("seckill_stock_left{{{p},store=\"mysql\"}}")
        ),
        Some(1.0)
    );
    assert!(
        gateway.contains("# HELP seckill_purchases_total "),
        "{gateway}"
    );

    let consumer_url = app.consumer.as_ref().unwrap().url();
    let consumer = scrape(client, &consumer_url).await;
    assert_series(
        &consumer,
        &[
            "seckill_orders_written_total",
            "seckill_consumer_redeliveries_total",
            "seckill_consumer_last_batch_timestamp_seconds",
        ],
    );
    assert_histograms(
        &consumer,
        &[
            "seckill_consumer_batch_size",
            "seckill_consumer_batch_seconds",
            "seckill_consumer_order_age_seconds",
        ],
    );

    // Reconcile as a daemon running every second: it finds the lost order and re-sends it.
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let settings = app.stack.settings(&[
        ("SECKILL_RECONCILE__LISTEN", &listen),
        ("SECKILL_RECONCILE__SCHEDULE", "* * * * * *"),
    ]);
    let _reconciler = InProcessService::start("reconcile", move |shutdown, sender| async move {
        let app = reconcile_svc::Application::build(settings, None, false).await?;
        let _ = sender.send(port);
        app.run_daemon(shutdown).await
    })
    .await;
    let reconcile_url = format!("http://{listen}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let reconcile = loop {
        if let Ok(response) = client.get(format!("{reconcile_url}/metrics")).send().await {
            let text = response.text().await.unwrap();
            // The run is counted once it has returned, after its repairs and gauges: a
            // scrape between the two found the repair but not the run.
            let repaired_and_counted = [
                "seckill_reconcile_repairs_total{action=\"republish\",outcome=\"repaired\"}",
                &format!("seckill_reconcile_drift_units{{{p},store=\"redis\"}}"),
                "seckill_reconcile_runs_total{status=",
            ]
            .iter()
            .all(|prefix| sample(&text, prefix).is_some());
            if repaired_and_counted {
                break text;
            }
        }
        assert!(
            Instant::now() < deadline,
            "reconcile did not repair the lost order"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_series(
        &reconcile,
        &[
            "seckill_reconcile_discrepancies_total{kind=\"missing_order\"}",
            "seckill_reconcile_runs_total{status=",
            "seckill_reconcile_last_run_timestamp_seconds",
            "seckill_reconcile_unresolved",
        ],
    );
    assert_histograms(&reconcile, &["seckill_reconcile_run_seconds"]);
    for store in ["redis", "mysql"] {
        assert_eq!(
            sample(
                &reconcile,
                &format!("seckill_reconcile_drift_units{{{p},store=\"{store}\"}}")
            ),
            Some(0.0),
            "{store}"
        );
    }
    // The re-sent order reaches MySQL.
    let deadline = Instant::now() + Duration::from_secs(30);
    while app.stack.db.db().order(&lost).await.unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the re-published order never arrived"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
