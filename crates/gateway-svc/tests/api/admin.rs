use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{assert_error, body, spawn_app};

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

    let forced = json!({"name": "phone", "stock": 10, "per_user_limit": 1, "force": true});
    let product = body(app.put_product(1, forced).await).await;
    assert_eq!(product["initial_stock"], 11);
    let view = app.admin_view(1).await;
    assert_eq!(view["redis_stock"], 10);
    assert_eq!(view["flows"], 1, "the reserved unit stays sold");
    // Buyer 7 already holds the per-user limit.
    assert_error(app.buy(7, 1).await, StatusCode::CONFLICT, "LIMIT_EXCEEDED").await;
}
