use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{TestApp, assert_error, body, spawn_app, spawn_app_with_consumer};

impl TestApp {
    /// The sale as the admin view shows it: initial stock and Redis stock, and the units
    /// reserved (one per flow: these tests buy one unit at a time). MySQL has no orders in
    /// these tests (no consumer runs), so its stock is the initial stock.
    async fn assert_sale(&self, product: u64, initial: i64, redis_stock: i64, flows: u64) {
        let view = self.admin_view(product).await;
        assert_eq!(view["initial_stock"], initial, "{view}");
        assert_eq!(view["redis_stock"], redis_stock, "{view}");
        assert_eq!(view["flows"], flows, "{view}");
        assert_eq!(view["mysql_stock"], initial, "{view}");
        assert_eq!(view["orders"], 0, "{view}");
    }
}

#[tokio::test]
async fn putting_a_product_loads_it_into_mysql_and_redis() {
    let app = spawn_app().await;
    let response = app
        .put_product(
            9,
            json!({"name": "phone", "stock": 500, "per_user_limit": 2}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let product = body(response).await;
    assert_eq!(product["product_id"], 9);
    assert_eq!(product["initial_stock"], 500);
    let view = app.admin_view(9).await;
    assert_eq!(view["initial_stock"], 500);
    assert_eq!(view["redis_stock"], 500);
    assert_eq!(view["mysql_stock"], 500);
    assert_eq!(view["flows"], 0);
    assert_eq!(view["orders"], 0);
    assert_eq!(view["sold_out"], false);
}

#[tokio::test]
async fn invalid_product_definitions_are_bad_requests() {
    let app = spawn_app().await;
    for body in [
        json!({"name": "", "stock": 5, "per_user_limit": 1}),
        json!({"name": "x", "stock": -1, "per_user_limit": 1}),
        json!({"name": "x", "stock": 5, "per_user_limit": 0}),
        json!({"name": "x", "stock": 5}),
        json!({"name": "x", "stock": 5, "per_user_limit": 1,
               "starts_at": "2030-01-02T00:00:00Z", "ends_at": "2030-01-01T00:00:00Z"}),
        json!({"name": "x", "stock": 5, "per_user_limit": 1, "starts_at": "tomorrow"}),
    ] {
        assert_error(
            app.put_product(3, body).await,
            StatusCode::BAD_REQUEST,
            "BAD_REQUEST",
        )
        .await;
    }
    let unknown = app
        .client
        .get(format!("{}/admin/v1/products/3", app.address))
        .bearer_auth(crate::helpers::ADMIN)
        .send()
        .await
        .unwrap();
    assert_error(unknown, StatusCode::NOT_FOUND, "NOT_FOUND").await;
}

#[tokio::test]
async fn the_health_endpoints_and_metrics_answer() {
    let app = spawn_app().await;
    for path in ["/healthz", "/readyz"] {
        let response = app
            .client
            .get(format!("{}{path}", app.address))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    app.open_sale(1, 1, 1).await;
    app.buy(1, 1).await;
    let metrics = app
        .client
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("seckill_purchases_total"), "{metrics}");
}

#[tokio::test]
async fn re_putting_a_product_during_a_sale_needs_force_and_keeps_what_was_sold() {
    let app = spawn_app().await;
    app.open_sale(1, 3, 1).await;
    assert_eq!(app.buy(7, 1).await.status(), StatusCode::ACCEPTED);

    let again = json!({"name": "phone", "stock": 10, "per_user_limit": 1});
    assert_error(
        app.put_product(1, again).await,
        StatusCode::CONFLICT,
        "ORDERS_EXIST",
    )
    .await;
    app.assert_sale(1, 3, 2, 1).await;

    // Forced, `stock` is the sale's new initial stock: 7 more units on sale.
    let forced = json!({"name": "phone", "stock": 10, "per_user_limit": 1, "force": true});
    let product = body(app.put_product(1, forced).await).await;
    assert_eq!(product["initial_stock"], 10);
    assert_eq!(product["stock"], 9);
    app.assert_sale(1, 10, 9, 1).await;
    // Buyer 7 already holds the per-user limit.
    assert_error(app.buy(7, 1).await, StatusCode::CONFLICT, "LIMIT_EXCEEDED").await;
}

#[tokio::test]
async fn a_forced_put_with_fewer_units_takes_them_off_sale_and_keeps_the_sold_ones() {
    let app = spawn_app().await;
    app.open_sale(1, 10, 1).await;
    for user in [1, 2] {
        assert_eq!(app.buy(user, 1).await.status(), StatusCode::ACCEPTED);
    }

    let fewer = json!({"name": "phone", "stock": 5, "per_user_limit": 1, "force": true});
    let product = body(app.put_product(1, fewer).await).await;

    assert_eq!(
        (&product["initial_stock"], &product["stock"]),
        (&json!(5), &json!(3))
    );
    app.assert_sale(1, 5, 3, 2).await;
    for user in 3..=6 {
        let expected = if user <= 5 {
            StatusCode::ACCEPTED
        } else {
            StatusCode::CONFLICT
        };
        assert_eq!(app.buy(user, 1).await.status(), expected, "buyer {user}");
    }
    app.assert_sale(1, 5, 0, 5).await;
}

#[tokio::test]
async fn a_forced_put_below_the_units_sold_is_refused_and_changes_nothing() {
    let app = spawn_app().await;
    app.open_sale(1, 4, 1).await;
    for user in [1, 2, 3] {
        assert_eq!(app.buy(user, 1).await.status(), StatusCode::ACCEPTED);
    }

    let too_few = json!({"name": "other", "stock": 2, "per_user_limit": 3, "force": true});
    assert_error(
        app.put_product(1, too_few).await,
        StatusCode::CONFLICT,
        "STOCK_BELOW_SOLD",
    )
    .await;

    app.assert_sale(1, 4, 1, 3).await;
    // The per-user limit did not change either.
    assert_error(app.buy(1, 1).await, StatusCode::CONFLICT, "LIMIT_EXCEEDED").await;
    let exactly = json!({"name": "phone", "stock": 3, "per_user_limit": 1, "force": true});
    assert_eq!(body(app.put_product(1, exactly).await).await["stock"], 0);
    app.assert_sale(1, 3, 0, 3).await;
}

#[tokio::test]
async fn changing_only_the_limit_or_window_of_a_running_sale_keeps_its_counts() {
    let app = spawn_app().await;
    app.open_sale(1, 6, 1).await;
    assert_eq!(app.buy(7, 1).await.status(), StatusCode::ACCEPTED);

    let limit_two = json!({"name": "renamed", "stock": 6, "per_user_limit": 2, "force": true,
                           "ends_at": "2999-01-01T00:00:00Z"});
    let product = body(app.put_product(1, limit_two).await).await;

    assert_eq!(
        (&product["initial_stock"], &product["stock"]),
        (&json!(6), &json!(5))
    );
    assert_eq!(product["ends_at"], "2999-01-01T00:00:00.000Z");
    app.assert_sale(1, 6, 5, 1).await;
    assert_eq!(
        app.buy(7, 1).await.status(),
        StatusCode::ACCEPTED,
        "the new limit holds"
    );
    app.assert_sale(1, 6, 4, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restock_of_a_product_redis_lost_asks_for_a_reload_and_changes_nothing() {
    let app = spawn_app_with_consumer().await;
    app.open_sale(1, 5, 1).await;
    let response = app.buy(7, 1).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let order = body(response).await["order_token"]
        .as_str()
        .unwrap()
        .to_owned();
    app.wait_confirmed(7, &order, Duration::from_secs(30)).await;
    app.stack.redis.delete_all_keys().expect("delete the keys");

    let restock = json!({"name": "phone", "stock": 9, "per_user_limit": 1, "force": true});
    assert_error(
        app.put_product(1, restock).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "UNAVAILABLE",
    )
    .await;

    let view = app.admin_view(1).await;
    assert_eq!(
        (
            &view["initial_stock"],
            &view["mysql_stock"],
            &view["redis_stock"]
        ),
        (&json!(5), &json!(4), &Value::Null),
        "{view}"
    );
}
