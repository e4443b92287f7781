//! After the purchase: the payment window, cancel, the signed payment callback, and the
//! buyer told of each change by long-poll and event stream, on any gateway.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use gateway_svc::Application;
use reqwest::StatusCode;
use serde_json::{Value, json};
use test_support::service::InProcessService;

use crate::helpers::{TestApp, assert_error, body, spawn_app, spawn_app_with_consumer};

const CONFIRMED_WITHIN: Duration = Duration::from_secs(20);
const PRICE: u64 = 1999;

async fn priced_sale(app: &TestApp, product: u64, stock: i64) {
    let response = app
        .put_product(
            product,
            json!({"name": "phone", "stock": stock, "per_user_limit": 2, "price_cents": PRICE}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body(response).await["price_cents"], PRICE);
}

/// A confirmed order of `user` for one unit of a priced product.
async fn confirmed_order(app: &TestApp, user: u64, product: u64) -> String {
    let order = app.buy_order(user, product).await;
    app.wait_confirmed(user, &order, CONFIRMED_WITHIN).await;
    order
}

fn payment(id: &str, order: &str, amount: u64) -> Value {
    json!({"payment_id": id, "order_token": order, "amount_cents": amount, "paid_at": Utc::now()})
}

#[tokio::test]
async fn a_confirmed_order_is_due_for_payment_within_the_window() {
    let app = spawn_app_with_consumer().await;
    priced_sale(&app, 1, 5).await;
    let order = confirmed_order(&app, 7, 1).await;

    let status = body(app.order_status(7, &order).await).await;
    assert_eq!(status["status"], "confirmed");
    let pay_by: DateTime<Utc> = status["pay_by"].as_str().unwrap().parse().unwrap();
    let window = pay_by - Utc::now();
    // The default window is 15 minutes, counted from the order's writing moments ago.
    assert!(
        window > chrono::Duration::minutes(14) && window <= chrono::Duration::minutes(15),
        "{status}"
    );
}

#[tokio::test]
async fn a_cancelled_order_gives_its_unit_back_and_it_sells_again() {
    let app = spawn_app_with_consumer().await;
    priced_sale(&app, 2, 1).await;
    let order = confirmed_order(&app, 7, 2).await;
    // Sold out, and this gateway now refuses from its flag without asking Redis.
    assert_error(app.buy(8, 2).await, StatusCode::CONFLICT, "SOLD_OUT").await;

    let response = app.cancel(7, &order).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body(response).await["status"], "cancelled");
    assert_error(
        app.cancel(7, &order).await,
        StatusCode::CONFLICT,
        "ORDER_CLOSED",
    )
    .await;

    let view = app.admin_view(2).await;
    assert_eq!(view["redis_stock"], 1, "{view}");
    assert_eq!(view["mysql_stock"], 1, "{view}");
    assert_eq!(view["returned"], 1, "{view}");
    assert_eq!(view["orders"], 1, "{view}");
    let second = app.buy(8, 2).await;
    assert_eq!(
        second.status(),
        StatusCode::ACCEPTED,
        "the returned unit is on sale"
    );
    assert_eq!(app.admin_view(2).await["redis_stock"], 0);
}

#[tokio::test]
async fn only_the_buyer_can_cancel_and_not_while_the_order_is_queued() {
    // No consumer: the order stays queued.
    let app = spawn_app().await;
    app.open_sale(3, 5, 1).await;
    let order = app.buy_order(7, 3).await;

    assert_error(
        app.cancel(8, &order).await,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
    )
    .await;
    let response = app.cancel(7, &order).await;
    assert!(response.headers().contains_key("retry-after"));
    assert_error(response, StatusCode::CONFLICT, "NOT_CONFIRMED").await;
    assert_eq!(
        app.admin_view(3).await["redis_stock"],
        4,
        "nothing given back"
    );
}

#[tokio::test]
async fn a_signed_payment_pays_the_order_once_and_a_replay_answers_the_same() {
    let app = spawn_app_with_consumer().await;
    priced_sale(&app, 4, 3).await;
    let order = confirmed_order(&app, 7, 4).await;
    let paid = payment("pay-1", &order, PRICE);

    let first = app.notify_payment(&paid).await;
    assert_eq!(first.status(), StatusCode::OK);
    let first = body(first).await;
    assert_eq!(first["status"], "paid");
    let replay = app.notify_payment(&paid).await;
    assert_eq!(replay.status(), StatusCode::OK);
    assert_eq!(body(replay).await, first);

    assert_eq!(
        body(app.order_status(7, &order).await).await["status"],
        "paid"
    );
    assert_error(
        app.cancel(7, &order).await,
        StatusCode::CONFLICT,
        "ORDER_CLOSED",
    )
    .await;
    let view = app.admin_view(4).await;
    assert_eq!(
        (view["paid"].clone(), view["returned"].clone()),
        (json!(1), json!(0)),
        "{view}"
    );
}

#[tokio::test]
async fn a_forged_wrong_or_unknown_payment_changes_nothing() {
    let app = spawn_app_with_consumer().await;
    priced_sale(&app, 5, 3).await;
    let order = confirmed_order(&app, 7, 5).await;

    let forged = app
        .notify_payment_signed(&payment("pay-f", &order, PRICE), "not-the-provider")
        .await;
    assert_error(forged, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED").await;
    let unsigned = app
        .client
        .post(format!("{}/api/v1/payments/notify", app.address))
        .json(&payment("pay-u", &order, PRICE))
        .send()
        .await
        .unwrap();
    assert_error(unsigned, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED").await;
    let short = app
        .notify_payment(&payment("pay-s", &order, PRICE - 1))
        .await;
    assert_error(short, StatusCode::CONFLICT, "AMOUNT_MISMATCH").await;
    let unknown = domain::OrderToken::random(domain::ProductId(5)).to_string();
    let stranger = app.notify_payment(&payment("pay-x", &unknown, PRICE)).await;
    assert_error(stranger, StatusCode::NOT_FOUND, "NOT_FOUND").await;
    let malformed = app.notify_payment(&json!({"payment_id": "pay-m"})).await;
    assert_error(malformed, StatusCode::BAD_REQUEST, "BAD_REQUEST").await;

    assert_eq!(
        body(app.order_status(7, &order).await).await["status"],
        "confirmed"
    );
    let view = app.admin_view(5).await;
    assert_eq!(
        (view["paid"].clone(), view["refunds_due"].clone()),
        (json!(0), json!(0)),
        "{view}"
    );
}

#[tokio::test]
async fn a_payment_for_a_cancelled_order_is_refused_and_due_for_refund() {
    let app = spawn_app_with_consumer().await;
    priced_sale(&app, 6, 3).await;
    let order = confirmed_order(&app, 7, 6).await;
    assert_eq!(app.cancel(7, &order).await.status(), StatusCode::OK);

    let late = payment("pay-late", &order, PRICE);
    assert_error(
        app.notify_payment(&late).await,
        StatusCode::CONFLICT,
        "ORDER_CLOSED",
    )
    .await;
    assert_error(
        app.notify_payment(&late).await,
        StatusCode::CONFLICT,
        "ORDER_CLOSED",
    )
    .await;
    let view = app.admin_view(6).await;
    assert_eq!(
        view["refunds_due"], 1,
        "the replay is the same refund: {view}"
    );
    assert_eq!(view["paid"], 0, "{view}");
}

#[tokio::test]
async fn a_long_poll_answers_as_soon_as_the_order_changes() {
    let app = spawn_app_with_consumer().await;
    priced_sale(&app, 8, 3).await;
    let order = confirmed_order(&app, 7, 8).await;

    let started = Instant::now();
    let (polled, cancelled) = tokio::join!(
        app.client
            .get(format!(
                "{}/api/v1/orders/{order}?wait_secs=20",
                app.address
            ))
            .header("X-User-Id", "7")
            .send(),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            app.cancel(7, &order).await
        }
    );
    assert_eq!(cancelled.status(), StatusCode::OK);
    assert_eq!(body(polled.unwrap()).await["status"], "cancelled");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    let long_poll = |wait_secs: &str| {
        app.client
            .get(format!(
                "{}/api/v1/orders/{order}?wait_secs={wait_secs}",
                app.address
            ))
            .header("X-User-Id", "7")
            .send()
    };
    let too_long = long_poll("31").await.unwrap();
    assert_error(too_long, StatusCode::BAD_REQUEST, "BAD_REQUEST").await;

    // Not a number: the same JSON error, not the framework's plain-text one.
    let negative = long_poll("-1").await.unwrap();
    assert_error(negative, StatusCode::BAD_REQUEST, "BAD_REQUEST").await;
}

/// Reads an event stream until it ends or `limit` passes; returns each event's order.
async fn read_events(mut stream: reqwest::Response, limit: Duration) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut text = String::new();
    while let Ok(chunk) = tokio::time::timeout_at(deadline, stream.chunk()).await {
        match chunk.expect("the stream reads") {
            Some(bytes) => text.push_str(std::str::from_utf8(&bytes).unwrap()),
            None => break,
        }
    }
    text.split("\n\n")
        .filter_map(|event| event.lines().find_map(|line| line.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).expect("each event's data is the order"))
        .collect()
}

#[tokio::test]
async fn an_event_stream_on_another_gateway_sees_the_payment_and_ends() {
    let app = spawn_app_with_consumer().await;
    priced_sale(&app, 9, 3).await;
    let order = confirmed_order(&app, 7, 9).await;
    // A second gateway of the same deployment: the buyer watches there, pays here.
    let settings = app.stack.settings(&[]);
    let other = InProcessService::start("gateway-2", move |shutdown, port| async move {
        let gateway = Application::build(settings).await?;
        let _ = port.send(gateway.port());
        gateway.run_until_stopped(shutdown).await
    })
    .await;

    let stream = app
        .client
        .get(format!("{}/api/v1/orders/{order}/events", other.url()))
        .header("X-User-Id", "7")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    assert_eq!(
        stream.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let reader = tokio::spawn(read_events(stream, Duration::from_secs(10)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let paid_at = Instant::now();
    let paid = app.notify_payment(&payment("pay-sse", &order, PRICE)).await;
    assert_eq!(paid.status(), StatusCode::OK);

    let events = reader.await.unwrap();
    let statuses: Vec<_> = events.iter().map(|e| e["status"].clone()).collect();
    assert_eq!(statuses, [json!("confirmed"), json!("paid")], "{events:?}");
    assert!(
        paid_at.elapsed() < Duration::from_secs(5),
        "the stream did not end after the final status"
    );
}

#[tokio::test]
async fn an_unpaid_order_expires_after_its_window_and_its_unit_sells_again() {
    let mut app = spawn_app().await;
    app.start_consumer_with(&[("SECKILL_ORDERS__PAYMENT_WINDOW_SECS", "2")])
        .await;
    priced_sale(&app, 10, 1).await;
    let order = confirmed_order(&app, 7, 10).await;
    let pay_by: DateTime<Utc> = body(app.order_status(7, &order).await).await["pay_by"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // The deadline rides on the broker's timer; the buyer's long-poll hears the expiry.
    let mut status = Value::Null;
    for _ in 0..3 {
        let polled = app
            .client
            .get(format!(
                "{}/api/v1/orders/{order}?wait_secs=10",
                app.address
            ))
            .header("X-User-Id", "7")
            .send()
            .await
            .unwrap();
        status = body(polled).await;
        if status["status"] == "expired" {
            break;
        }
    }
    assert_eq!(status["status"], "expired", "{status}");
    let late = Utc::now() - pay_by;
    assert!(
        late < chrono::Duration::seconds(10),
        "expired {late} after pay_by"
    );

    let late_payment = app
        .notify_payment(&payment("pay-after", &order, PRICE))
        .await;
    assert_error(late_payment, StatusCode::CONFLICT, "ORDER_CLOSED").await;
    let view = app.admin_view(10).await;
    assert_eq!(view["returned"], 1, "{view}");
    assert_eq!(view["refunds_due"], 1, "{view}");
    assert_eq!(
        app.buy(8, 10).await.status(),
        StatusCode::ACCEPTED,
        "the expired unit is on sale again"
    );
}
