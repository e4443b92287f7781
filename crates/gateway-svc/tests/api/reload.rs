//! Redis loses a product in the middle of a sale: the gateway refuses to sell it, and an
//! admin reload rebuilds it from MySQL without selling a unit twice.

use std::time::Duration;

use reqwest::{Response, StatusCode};

use crate::helpers::{
    ADMIN, TestApp, assert_error, body, spawn_app_with_consumer, spawn_app_with_consumer_and,
};

const CONFIRMED_WITHIN: Duration = Duration::from_secs(30);

fn lose_redis_data(app: &TestApp) {
    let lost = app.stack.redis.delete_all_keys().expect("delete the keys");
    assert!(lost > 0, "the sale wrote keys");
}

async fn reload(app: &TestApp, product: u64) -> Response {
    app.client
        .post(format!(
            "{}/admin/v1/products/{product}/reload",
            app.address
        ))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("the gateway answers")
}

/// Buys one unit for `user`; returns the order token of a 202.
async fn bought(app: &TestApp, user: u64, product: u64) -> String {
    let response = app.buy(user, product).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    body(response).await["order_token"]
        .as_str()
        .expect("an order token")
        .to_owned()
}

async fn mysql_orders(app: &TestApp, product: u64) -> i64 {
    app.admin_view(product).await["orders"]
        .as_i64()
        .expect("orders")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_product_redis_lost_is_not_sold_until_a_reload_rebuilds_it_from_mysql() {
    let app = spawn_app_with_consumer().await;
    let product = 7101;
    app.open_sale(product, 10, 1).await;
    let mut sold = Vec::new();
    for user in 1..=4 {
        let order = bought(&app, user, product).await;
        app.wait_confirmed(user, &order, CONFIRMED_WITHIN).await;
        sold.push((user, order));
    }

    let held_through_the_loss = app.token(5, product).await;
    lose_redis_data(&app);
    // Neither a token nor a purchase with one issued before: Redis cannot say what is left.
    assert_error(
        app.request_token(5, product).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "UNAVAILABLE",
    )
    .await;
    assert_error(
        app.purchase(5, product, &held_through_the_loss, 1).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "UNAVAILABLE",
    )
    .await;

    let response = reload(&app, product).await;
    assert_eq!(response.status(), StatusCode::OK);
    let reloaded = body(response).await;
    assert_eq!(reloaded["orders_restored"], 4);
    assert_eq!(
        reloaded["stock"], 6,
        "10 units, 4 of them ordered: {reloaded}"
    );

    // What the buyers did before the loss still holds: their orders show, and the
    // per-user limit of 1 refuses a second unit.
    for (user, order) in &sold {
        assert_eq!(
            body(app.order_status(*user, order).await).await["status"],
            "confirmed"
        );
        assert_error(
            app.buy(*user, product).await,
            StatusCode::CONFLICT,
            "LIMIT_EXCEEDED",
        )
        .await;
    }
    let mut accepted = 0;
    for user in 5..=20 {
        if app.buy(user, product).await.status() == StatusCode::ACCEPTED {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 6, "exactly the units MySQL had left are sold");
    let view = app.admin_view(product).await;
    assert_eq!(view["redis_stock"], 0);
    assert_eq!(view["flows"], 10);

    assert_error(
        reload(&app, product).await,
        StatusCode::CONFLICT,
        "PRODUCT_LOADED",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_waits_for_orders_still_queued_and_counts_them_as_sold() {
    let mut app = spawn_app_with_consumer_and(&[("SECKILL_GATEWAY__RELOAD_DRAIN_SECS", "2")]).await;
    let product = 7102;
    app.open_sale(product, 5, 1).await;
    let first = bought(&app, 1, product).await;
    app.wait_confirmed(1, &first, CONFIRMED_WITHIN).await;

    // The consumers stop; two more orders wait in the queue when Redis loses the product.
    app.consumer.take();
    bought(&app, 2, product).await;
    bought(&app, 3, product).await;
    lose_redis_data(&app);

    assert_error(
        reload(&app, product).await,
        StatusCode::CONFLICT,
        "ORDERS_IN_FLIGHT",
    )
    .await;
    assert_error(
        app.request_token(4, product).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "UNAVAILABLE",
    )
    .await;

    app.start_consumer().await;
    // The consumer catches up within the drain time, or the next reload does.
    let deadline = tokio::time::Instant::now() + CONFIRMED_WITHIN;
    let reloaded = loop {
        let response = reload(&app, product).await;
        if response.status() == StatusCode::OK {
            break body(response).await;
        }
        assert_error(response, StatusCode::CONFLICT, "ORDERS_IN_FLIGHT").await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "the queue never drained"
        );
    };
    assert_eq!(reloaded["orders_restored"], 3);
    assert_eq!(
        reloaded["stock"], 2,
        "the queued orders' units stay sold: {reloaded}"
    );
    assert_eq!(mysql_orders(&app, product).await, 3);

    let mut accepted = 0;
    for user in 4..=10 {
        if app.buy(user, product).await.status() == StatusCode::ACCEPTED {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 2);
}
