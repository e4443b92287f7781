use std::time::Duration;

use futures::future::join_all;
use reqwest::StatusCode;

use crate::helpers::{assert_error, body, spawn_app, spawn_app_with, spawn_app_with_consumer};

#[tokio::test]
async fn a_purchase_is_queued_then_confirmed_with_stock_taken_on_both_sides() {
    let app = spawn_app_with_consumer().await;
    app.open_sale(1, 5, 1).await;

    let response = app.buy(7, 1).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let queued = body(response).await;
    assert_eq!(queued["status"], "queued");
    let order_token = queued["order_token"].as_str().unwrap().to_owned();

    app.wait_confirmed(7, &order_token, Duration::from_secs(30))
        .await;
    let status = body(app.order_status(7, &order_token).await).await;
    assert_eq!(status["product_id"], 1);
    assert_eq!(status["quantity"], 1);
    let view = app.admin_view(1).await;
    assert_eq!(view["redis_stock"], 4);
    assert_eq!(view["mysql_stock"], 4);
    assert_eq!(view["orders"], 1);
    assert_eq!(view["flows"], 1);
}

#[tokio::test]
async fn purchase_with_a_used_token_is_rejected_as_duplicate() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 5).await;
    let token = app.token(7, 1).await;
    assert_eq!(
        app.purchase(7, 1, &token, 1).await.status(),
        StatusCode::ACCEPTED
    );
    assert_error(
        app.purchase(7, 1, &token, 1).await,
        StatusCode::CONFLICT,
        "DUPLICATE",
    )
    .await;
    assert_eq!(app.admin_view(1).await["redis_stock"], 4);
}

#[tokio::test]
async fn the_same_token_fired_100_times_in_parallel_is_accepted_once() {
    let app = spawn_app_with(&[("SECKILL_RATE_LIMIT__USER_BURST", "1000")]).await;
    app.open_sale(1, 50, 5).await;
    let token = app.token(7, 1).await;
    let answers = join_all((0..100).map(|_| app.purchase(7, 1, &token, 1))).await;
    let accepted = answers
        .iter()
        .filter(|r| r.status() == StatusCode::ACCEPTED)
        .count();
    let duplicates = answers
        .iter()
        .filter(|r| r.status() == StatusCode::CONFLICT)
        .count();
    assert_eq!((accepted, duplicates), (1, 99));
    assert_eq!(app.admin_view(1).await["redis_stock"], 49);
}

#[tokio::test]
async fn a_buyer_at_the_per_user_limit_is_told_limit_exceeded() {
    let app = spawn_app().await;
    app.open_sale(1, 10, 2).await;
    assert_eq!(app.buy(7, 1).await.status(), StatusCode::ACCEPTED);
    assert_eq!(app.buy(7, 1).await.status(), StatusCode::ACCEPTED);
    assert_error(app.buy(7, 1).await, StatusCode::CONFLICT, "LIMIT_EXCEEDED").await;
    assert_eq!(app.admin_view(1).await["redis_stock"], 8);
}

#[tokio::test]
async fn buyers_after_the_last_unit_are_told_sold_out_and_the_product_is_flagged() {
    let app = spawn_app().await;
    app.open_sale(1, 2, 1).await;
    assert_eq!(app.buy(1, 1).await.status(), StatusCode::ACCEPTED);
    assert_eq!(app.buy(2, 1).await.status(), StatusCode::ACCEPTED);
    assert_error(app.buy(3, 1).await, StatusCode::CONFLICT, "SOLD_OUT").await;
    let view = app.admin_view(1).await;
    assert_eq!(view["redis_stock"], 0);
    assert_eq!(view["sold_out"], true);

    // A restock (the new initial stock: one unit more than was sold) clears the flag and
    // sells again.
    let restock = app
        .put_product(
            1,
            serde_json::json!({"name": "phone", "stock": 3, "per_user_limit": 1, "force": true}),
        )
        .await;
    assert_eq!(restock.status(), StatusCode::OK);
    assert_eq!(app.admin_view(1).await["sold_out"], false);
    assert_eq!(app.buy(4, 1).await.status(), StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_buyer_cannot_see_another_buyers_order() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    let queued = body(app.buy(7, 1).await).await;
    let order_token = queued["order_token"].as_str().unwrap();
    assert_eq!(
        app.order_status(7, order_token).await.status(),
        StatusCode::OK
    );
    assert_error(
        app.order_status(8, order_token).await,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
    )
    .await;
    assert_error(
        app.order_status(7, "1-00000000000000000000000000000000")
            .await,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
    )
    .await;
}

#[tokio::test]
async fn a_buyer_over_the_rate_limit_is_told_when_to_retry() {
    let app = spawn_app_with(&[
        ("SECKILL_RATE_LIMIT__USER_PER_SEC", "1"),
        ("SECKILL_RATE_LIMIT__USER_BURST", "2"),
    ])
    .await;
    app.open_sale(1, 5, 1).await;
    app.token(7, 1).await;
    app.token(7, 1).await;
    let response = app.request_token(7, 1).await;
    assert!(response.headers().contains_key("retry-after"));
    assert_error(response, StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED").await;
    // Another buyer is not affected.
    assert_eq!(app.request_token(8, 1).await.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn tokens_are_refused_before_the_sale_opens_and_for_unknown_products() {
    let app = spawn_app().await;
    let starts = chrono::Utc::now() + chrono::Duration::hours(1);
    let response = app
        .put_product(
            1,
            serde_json::json!({"name": "later", "stock": 5, "per_user_limit": 1,
                "starts_at": starts.to_rfc3339()}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_error(
        app.request_token(7, 1).await,
        StatusCode::FORBIDDEN,
        "SALE_NOT_OPEN",
    )
    .await;
    assert_error(
        app.request_token(7, 2).await,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
    )
    .await;
}

#[tokio::test]
async fn a_purchase_before_the_sale_opens_is_refused_as_sale_not_open_and_takes_nothing() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    // A token from while it was open; then the sale is moved an hour ahead.
    let token = app.token(7, 1).await;
    let starts = chrono::Utc::now() + chrono::Duration::hours(1);
    let later = serde_json::json!({"name": "later", "stock": 5, "per_user_limit": 1,
        "starts_at": starts.to_rfc3339()});
    assert_eq!(app.put_product(1, later).await.status(), StatusCode::OK);

    assert_error(
        app.purchase(7, 1, &token, 1).await,
        StatusCode::FORBIDDEN,
        "SALE_NOT_OPEN",
    )
    .await;
    app.assert_nothing_taken(1, 5).await;
}

#[tokio::test]
async fn tokens_and_purchases_after_the_sale_ends_are_refused_as_sale_not_open() {
    let app = spawn_app().await;
    let ends = chrono::Utc::now() + chrono::Duration::milliseconds(1_500);
    let closing = serde_json::json!({"name": "brief", "stock": 5, "per_user_limit": 1,
        "ends_at": ends.to_rfc3339()});
    assert_eq!(app.put_product(1, closing).await.status(), StatusCode::OK);
    let token = app.token(7, 1).await;

    let past_the_end = (ends - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(past_the_end + Duration::from_millis(100)).await;
    assert_error(
        app.request_token(8, 1).await,
        StatusCode::FORBIDDEN,
        "SALE_NOT_OPEN",
    )
    .await;
    // A token issued while the sale was open buys nothing once it has closed.
    assert_error(
        app.purchase(7, 1, &token, 1).await,
        StatusCode::FORBIDDEN,
        "SALE_NOT_OPEN",
    )
    .await;
    app.assert_nothing_taken(1, 5).await;
}

#[tokio::test]
async fn requests_over_the_instance_rate_limit_are_told_when_to_retry_and_change_nothing() {
    let app = spawn_app_with(&[("SECKILL_RATE_LIMIT__GLOBAL_PER_SEC", "1")]).await;
    app.open_sale(1, 5, 1).await;
    let token = app.token(7, 1).await;

    // Other buyers, each far under their own limit: the instance's budget is spent.
    let refused = app.request_token(8, 1).await;
    let retry_after: u64 = refused
        .headers()
        .get("retry-after")
        .expect("Retry-After is set")
        .to_str()
        .unwrap()
        .parse()
        .expect("Retry-After in whole seconds");
    assert!((1..=2).contains(&retry_after), "{retry_after}");
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED").await;
    let purchase = app.purchase(7, 1, &token, 1).await;
    assert!(purchase.headers().contains_key("retry-after"));
    assert_error(purchase, StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED").await;
    assert_eq!(app.admin_view(1).await["flows"], 0);

    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    assert_eq!(
        app.purchase(7, 1, &token, 1).await.status(),
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn an_order_whose_reserved_unit_was_given_back_is_reported_failed() {
    // No public request makes a send fail in this harness (the broker is shared), so the
    // test does what the purchase path does around one: pre-deduct, then release.lua.
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    let order = "1-0123456789abcdef0123456789abcdef";
    let cache = app.stack.redis.cache();
    let reserved = cache
        .pre_deduct(&order.parse().unwrap(), "7".parse().unwrap(), 1)
        .await
        .unwrap();
    assert!(
        format!("{reserved:?}").starts_with("Reserved"),
        "{reserved:?}"
    );
    assert_eq!(
        body(app.order_status(7, order).await).await["status"],
        "queued"
    );

    let released = cache
        .release(&order.parse().unwrap(), "send_failed")
        .await
        .unwrap();
    assert_eq!(format!("{released:?}"), "Released");
    let response = app.order_status(7, order).await;
    assert_eq!(response.status(), StatusCode::OK);
    let status = body(response).await;
    assert_eq!(status["status"], "failed", "{status}");
    assert_eq!(status["order_token"], order);
    assert_eq!(status["product_id"], 1);
    assert_eq!(status["quantity"], 1);
    assert_error(
        app.order_status(8, order).await,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
    )
    .await;
    app.assert_nothing_taken(1, 5).await;
}

#[tokio::test]
async fn the_order_a_token_will_place_is_named_when_the_token_is_issued() {
    let app = spawn_app().await;
    app.open_sale(31, 5, 1).await;
    let issued = body(app.request_token(7, 31).await).await;
    let token = issued["token"].as_str().unwrap();
    let named = issued["order_token"].as_str().unwrap();

    // Before the purchase the order is unknown; polling it is how a buyer who lost the
    // purchase's answer finds out.
    assert_eq!(
        app.order_status(7, named).await.status(),
        StatusCode::NOT_FOUND
    );
    let queued = body(app.purchase(7, 31, token, 1).await).await;
    assert_eq!(queued["order_token"], named);
    assert_eq!(app.order_status(7, named).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_purchase_past_the_in_flight_cap_is_told_to_retry_and_its_token_still_buys() {
    // One purchase under way at a time, and a winner's message waits 3 s for others to
    // join it: the first purchase is still under way when the second arrives.
    let app = spawn_app_with(&[
        ("SECKILL_RATE_LIMIT__PURCHASES_IN_FLIGHT", "1"),
        ("SECKILL_GATEWAY__SEND_LINGER_MS", "3000"),
    ])
    .await;
    app.open_sale(1, 5, 1).await;
    let first_token = app.token(7, 1).await;
    let second_token = app.token(8, 1).await;

    let (first, ()) = tokio::join!(app.purchase(7, 1, &first_token, 1), async {
        // Its unit reserved, the first purchase waits in its message's linger.
        app.wait_flows(1, 1, Duration::from_millis(2500)).await;
        let refused = app.purchase(8, 1, &second_token, 1).await;
        assert_eq!(
            refused
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap()),
            Some("1")
        );
        assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED").await;
        assert_eq!(
            app.admin_view(1).await["flows"],
            1,
            "only the first reserved"
        );
    });
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    // The refusal took nothing: neither a unit nor the token.
    assert_eq!(
        app.purchase(8, 1, &second_token, 1).await.status(),
        StatusCode::ACCEPTED
    );
    let view = app.admin_view(1).await;
    assert_eq!(view["redis_stock"], 3, "{view}");
    assert_eq!(view["flows"], 2, "{view}");
}

#[tokio::test]
async fn an_order_in_mysql_whose_confirmation_redis_lost_is_reported_confirmed_not_queued() {
    let app = spawn_app_with_consumer().await;
    app.open_sale(1, 5, 1).await;
    let queued = body(app.buy(7, 1).await).await;
    let order_token = queued["order_token"].as_str().unwrap().to_owned();
    app.wait_confirmed(7, &order_token, Duration::from_secs(30))
        .await;
    assert_eq!(app.admin_view(1).await["orders"], 1, "MySQL has the order");

    // The consumer's mark_confirmed never reached Redis: the order is written, its flow
    // committed, and Redis has no result for it.
    let result_key = app.stack.redis.cache().keys(domain::ProductId(1)).result;
    assert!(
        app.stack
            .redis
            .delete_field(&result_key, &order_token)
            .unwrap()
    );
    // Past the time an order normally takes to reach MySQL, the gateway asks MySQL.
    tokio::time::sleep(gateway_svc::routes::orders::ASK_MYSQL_AFTER).await;

    let status = body(app.order_status(7, &order_token).await).await;
    assert_eq!(status["status"], "confirmed", "{status}");
    assert_eq!(status["quantity"], 1, "{status}");
    let written_back = app.stack.redis.field(&result_key, &order_token).unwrap();
    assert!(
        written_back
            .as_deref()
            .is_some_and(|result| result.starts_with("confirmed ")),
        "the answer from MySQL is written back with its deadline, so the next poll needs Redis alone: {written_back:?}"
    );
    // Another buyer still learns nothing about it.
    assert_error(
        app.order_status(8, &order_token).await,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
    )
    .await;
}

#[tokio::test]
async fn a_token_of_the_last_sale_is_refused_once_the_product_is_put_up_afresh() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    let of_the_last_sale = app.token(7, 1).await;

    // Nothing was sold, so this PUT is a new sale of the product, not a restock.
    app.open_sale(1, 5, 1).await;
    assert_error(
        app.purchase(7, 1, &of_the_last_sale, 1).await,
        StatusCode::FORBIDDEN,
        "SALE_NOT_OPEN",
    )
    .await;
    app.assert_nothing_taken(1, 5).await;

    let of_this_sale = app.token(7, 1).await;
    assert_eq!(
        app.purchase(7, 1, &of_this_sale, 1).await.status(),
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn a_token_stays_good_through_a_restock_of_its_sale() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    let token = app.token(7, 1).await;
    // A unit sold makes the next PUT a restock of the running sale.
    assert_eq!(app.buy(8, 1).await.status(), StatusCode::ACCEPTED);
    let restock = app
        .put_product(
            1,
            serde_json::json!({"name": "phone", "stock": 10, "per_user_limit": 1, "force": true}),
        )
        .await;
    assert_eq!(
        restock.status(),
        StatusCode::OK,
        "{:?}",
        restock.text().await
    );

    assert_eq!(
        app.purchase(7, 1, &token, 1).await.status(),
        StatusCode::ACCEPTED
    );
}
