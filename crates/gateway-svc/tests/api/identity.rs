use jsonwebtoken::{EncodingKey, Header, encode};
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{ADMIN, TestApp, assert_error, spawn_app, spawn_app_with};

#[tokio::test]
async fn buyers_without_a_usable_identity_are_unauthenticated() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    let url = format!("{}/api/v1/products/1/tokens", app.address);
    let missing = app.client.post(&url).send().await.unwrap();
    assert_error(missing, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED").await;
    for bad in ["abc", "-1", "", "18446744073709551616"] {
        let response = app
            .client
            .post(&url)
            .header("X-User-Id", bad)
            .send()
            .await
            .unwrap();
        assert_error(response, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED").await;
    }
}

#[tokio::test]
async fn admin_endpoints_require_the_admin_token() {
    let app = spawn_app().await;
    let url = format!("{}/admin/v1/products/1", app.address);
    let body = json!({"name": "phone", "stock": 5, "per_user_limit": 1});
    for token in [None, Some("wrong"), Some("dev-admin-tokeN")] {
        let mut request = app.client.put(&url).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        assert_error(
            request.send().await.unwrap(),
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
        )
        .await;
    }
    let get = app.client.get(&url).send().await.unwrap();
    assert_error(get, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED").await;
    let ok = app
        .client
        .put(&url)
        .bearer_auth(ADMIN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
}

const JWT_SECRET: &str = "a-test-jwt-secret-of-some-length";

fn jwt(claims: serde_json::Value, secret: &str, header: Header) -> String {
    encode(
        &header,
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

#[tokio::test]
async fn jwt_mode_takes_the_buyer_from_a_valid_hs256_token_only() {
    let app = jwt_app_selling(1, 5).await;
    let now = chrono::Utc::now().timestamp();
    let url = format!("{}/api/v1/products/1/tokens", app.address);
    let ask = |bearer: String| app.client.post(&url).bearer_auth(bearer).send();

    let valid = jwt(
        json!({"sub": "42", "exp": now + 60}),
        JWT_SECRET,
        Header::default(),
    );
    assert_eq!(ask(valid).await.unwrap().status(), StatusCode::CREATED);

    let refused = [
        jwt(
            json!({"sub": "42", "exp": now - 60}),
            JWT_SECRET,
            Header::default(),
        ),
        jwt(
            json!({"sub": "42", "exp": now + 60}),
            "another-secret-entirely",
            Header::default(),
        ),
        jwt(
            json!({"sub": "42", "exp": now + 60, "nbf": now + 600}),
            JWT_SECRET,
            Header::default(),
        ),
        jwt(
            json!({"sub": "not-a-u64", "exp": now + 60}),
            JWT_SECRET,
            Header::default(),
        ),
        jwt(json!({"sub": "42"}), JWT_SECRET, Header::default()),
        jwt(
            json!({"sub": "42", "exp": now + 60}),
            JWT_SECRET,
            Header::new(jsonwebtoken::Algorithm::HS512),
        ),
    ];
    for token in refused {
        assert_error(
            ask(token).await.unwrap(),
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
        )
        .await;
    }
    // The header mode's identity means nothing in JWT mode.
    let header_only = app
        .client
        .post(&url)
        .header("X-User-Id", "42")
        .send()
        .await
        .unwrap();
    assert_error(header_only, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED").await;
}

#[tokio::test]
async fn a_wrong_admin_token_is_refused_on_every_admin_endpoint_and_changes_nothing() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    let url = format!("{}/admin/v1/products/1", app.address);
    let restock = json!({"name": "phone", "stock": 99, "per_user_limit": 1, "force": true});
    for token in [
        "wrong",
        "dev-admin-tokeN",
        "dev-admin-token-and-more",
        "dev-admin-toke",
    ] {
        let get = app
            .client
            .get(&url)
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_error(get, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED").await;
        let put = app
            .client
            .put(&url)
            .bearer_auth(token)
            .json(&restock)
            .send()
            .await
            .unwrap();
        assert_error(put, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED").await;
        let reload = app
            .client
            .post(format!("{url}/reload"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_error(reload, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED").await;
    }
    let view = app.admin_view(1).await;
    assert_eq!(view["initial_stock"], 5);
    assert_eq!(view["redis_stock"], 5);
    assert_eq!(view["mysql_stock"], 5);
}

#[tokio::test]
async fn jwt_mode_buys_with_a_valid_jwt_only_and_an_expired_or_forged_one_takes_nothing() {
    let app = jwt_app_selling(1, 5).await;
    let now = chrono::Utc::now().timestamp();
    let claims = |exp: i64| json!({"sub": "42", "exp": exp});
    let valid = jwt(claims(now + 60), JWT_SECRET, Header::default());
    let issued = app
        .client
        .post(format!("{}/api/v1/products/1/tokens", app.address))
        .bearer_auth(&valid)
        .send()
        .await
        .unwrap();
    assert_eq!(issued.status(), StatusCode::CREATED);
    let token = crate::helpers::body(issued).await["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let purchase = || {
        app.client
            .post(format!("{}/api/v1/products/1/purchase", app.address))
            .json(&json!({"token": token, "quantity": 1}))
    };

    let expired = jwt(claims(now - 60), JWT_SECRET, Header::default());
    let forged = jwt(
        claims(now + 60),
        "another-secret-entirely",
        Header::default(),
    );
    for bearer in [expired, forged] {
        let response = purchase().bearer_auth(bearer).send().await.unwrap();
        assert_error(response, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED").await;
    }
    let header_only = purchase().header("X-User-Id", "42").send().await.unwrap();
    assert_error(header_only, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED").await;
    app.assert_nothing_taken(1, 5).await;

    let bought = purchase().bearer_auth(&valid).send().await.unwrap();
    assert_eq!(bought.status(), StatusCode::ACCEPTED);
    let queued = crate::helpers::body(bought).await;
    assert_eq!(queued["status"], "queued");
    let order = app
        .client
        .get(format!(
            "{}/api/v1/orders/{}",
            app.address,
            queued["order_token"].as_str().unwrap()
        ))
        .bearer_auth(&valid)
        .send()
        .await
        .unwrap();
    assert_eq!(order.status(), StatusCode::OK);
    assert_eq!(app.admin_view(1).await["redis_stock"], 4);
}

/// A gateway in JWT mode (secret [`JWT_SECRET`]) with `product` on sale, one unit per buyer.
async fn jwt_app_selling(product: u64, stock: i64) -> TestApp {
    let app = spawn_app_with(&[
        ("SECKILL_AUTH__MODE", "jwt"),
        ("SECKILL_AUTH__JWT_SECRET", JWT_SECRET),
    ])
    .await;
    app.open_sale(product, stock, 1).await;
    app
}
