use jsonwebtoken::{EncodingKey, Header, encode};
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{ADMIN, assert_error, spawn_app, spawn_app_with};

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
    let app = spawn_app_with(&[
        ("SECKILL_AUTH__MODE", "jwt"),
        ("SECKILL_AUTH__JWT_SECRET", JWT_SECRET),
    ])
    .await;
    app.open_sale(1, 5, 1).await;
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
