use jsonwebtoken::{EncodingKey, Header, encode};
use reqwest::{Response, StatusCode};
use serde_json::json;

use crate::helpers::{ADMIN, TestApp, assert_error, spawn_app, spawn_app_with};

/// Every refusal in this file is the same answer: 401 with the `UNAUTHENTICATED` code.
async fn assert_unauthenticated(response: Response) {
    assert_error(response, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED").await;
}

#[tokio::test]
async fn buyers_without_a_usable_identity_are_unauthenticated() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    let url = format!("{}/api/v1/products/1/tokens", app.address);
    let missing = app.client.post(&url).send().await.unwrap();
    assert_unauthenticated(missing).await;
    for bad in ["abc", "-1", "", "18446744073709551616"] {
        let response = app
            .client
            .post(&url)
            .header("X-User-Id", bad)
            .send()
            .await
            .unwrap();
        assert_unauthenticated(response).await;
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
        assert_unauthenticated(request.send().await.unwrap()).await;
    }
    let get = app.client.get(&url).send().await.unwrap();
    assert_unauthenticated(get).await;
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
        assert_unauthenticated(ask(token).await.unwrap()).await;
    }
    // The header mode's identity means nothing in JWT mode.
    let header_only = app
        .client
        .post(&url)
        .header("X-User-Id", "42")
        .send()
        .await
        .unwrap();
    assert_unauthenticated(header_only).await;
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
        assert_unauthenticated(get).await;
        let put = app
            .client
            .put(&url)
            .bearer_auth(token)
            .json(&restock)
            .send()
            .await
            .unwrap();
        assert_unauthenticated(put).await;
        let reload = app
            .client
            .post(format!("{url}/reload"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_unauthenticated(reload).await;
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
        assert_unauthenticated(response).await;
    }
    let header_only = purchase().header("X-User-Id", "42").send().await.unwrap();
    assert_unauthenticated(header_only).await;
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

/// `{"alg":"none","typ":"JWT"}`, base64url: the header of an unsigned JWT.
const ALG_NONE_HEADER: &str = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0";

/// `token` with its header swapped for [`ALG_NONE_HEADER`], and `signature` after it.
fn unsigned(token: &str, signature: &str) -> String {
    let payload = token.split('.').nth(1).expect("a JWT has a payload");
    format!("{ALG_NONE_HEADER}.{payload}.{signature}")
}

#[tokio::test]
async fn a_jwt_with_alg_none_is_unauthenticated_and_takes_nothing() {
    let app = jwt_app_selling(1, 5).await;
    let now = chrono::Utc::now().timestamp();
    let valid = jwt(
        json!({"sub": "42", "exp": now + 60}),
        JWT_SECRET,
        Header::default(),
    );
    let url = format!("{}/api/v1/products/1/tokens", app.address);
    let ask = |bearer: String| app.client.post(&url).bearer_auth(bearer).send();
    assert_eq!(
        ask(valid.clone()).await.unwrap().status(),
        StatusCode::CREATED
    );

    // Unsigned, and unsigned but carrying the valid token's signature: the algorithm a
    // token names is never trusted.
    let real_signature = valid.rsplit('.').next().unwrap();
    for token in [unsigned(&valid, ""), unsigned(&valid, real_signature)] {
        assert_unauthenticated(ask(token).await.unwrap()).await;
    }
    let purchase = app
        .client
        .post(format!("{}/api/v1/products/1/purchase", app.address))
        .bearer_auth(unsigned(&valid, ""))
        .json(&json!({"token": "v2.k1.x.y", "quantity": 1}))
        .send()
        .await
        .unwrap();
    assert_unauthenticated(purchase).await;
    app.assert_nothing_taken(1, 5).await;
}

const ISSUER: &str = "https://id.example.com";
const AUDIENCE: &str = "seckill";

#[tokio::test]
async fn with_an_issuer_and_audience_configured_a_jwt_must_carry_both() {
    let app = spawn_app_with(&[
        ("SECKILL_AUTH__MODE", "jwt"),
        ("SECKILL_AUTH__JWT_SECRET", JWT_SECRET),
        ("SECKILL_AUTH__JWT_ISSUER", ISSUER),
        ("SECKILL_AUTH__JWT_AUDIENCE", AUDIENCE),
    ])
    .await;
    app.open_sale(1, 5, 1).await;
    let exp = chrono::Utc::now().timestamp() + 60;
    let url = format!("{}/api/v1/products/1/tokens", app.address);
    let ask = |claims: serde_json::Value| {
        app.client
            .post(&url)
            .bearer_auth(jwt(claims, JWT_SECRET, Header::default()))
            .send()
    };

    let good = json!({"sub": "42", "exp": exp, "iss": ISSUER, "aud": AUDIENCE});
    assert_eq!(ask(good).await.unwrap().status(), StatusCode::CREATED);
    let among_several = json!({"sub": "42", "exp": exp, "iss": ISSUER, "aud": ["other", AUDIENCE]});
    assert_eq!(
        ask(among_several).await.unwrap().status(),
        StatusCode::CREATED
    );

    for refused in [
        json!({"sub": "42", "exp": exp, "iss": "https://evil.example.com", "aud": AUDIENCE}),
        json!({"sub": "42", "exp": exp, "aud": AUDIENCE}),
        json!({"sub": "42", "exp": exp, "iss": ISSUER, "aud": "another-service"}),
        json!({"sub": "42", "exp": exp, "iss": ISSUER}),
    ] {
        let response = ask(refused.clone()).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{refused}");
        assert_unauthenticated(response).await;
    }
}

#[tokio::test]
async fn with_no_audience_configured_a_jwt_meant_for_an_audience_is_refused() {
    let app = jwt_app_selling(1, 5).await;
    let exp = chrono::Utc::now().timestamp() + 60;
    let url = format!("{}/api/v1/products/1/tokens", app.address);
    let ask = |claims: serde_json::Value| {
        app.client
            .post(&url)
            .bearer_auth(jwt(claims, JWT_SECRET, Header::default()))
            .send()
    };
    // Any issuer: none is configured.
    let any_issuer = json!({"sub": "42", "exp": exp, "iss": "https://anyone.example.com"});
    assert_eq!(ask(any_issuer).await.unwrap().status(), StatusCode::CREATED);
    let for_another_service = json!({"sub": "42", "exp": exp, "aud": "another-service"});
    assert_unauthenticated(ask(for_another_service).await.unwrap()).await;
}

/// The gateway binary's exit code and stderr, started outside local mode (no
/// `SECKILL_ENV`, nothing inherited) with `env` over the shipped config files.
async fn start_outside_local_mode(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_gateway-svc"))
        .env_clear()
        .env(
            "SECKILL_CONFIG_DIR",
            test_support::process::repo_root().join("config"),
        )
        .env("SECKILL_GATEWAY__LISTEN", "127.0.0.1:0")
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(30), run)
        .await
        .expect("the gateway stopped at its settings instead of starting")
        .expect("the gateway binary runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const OPERATORS_KEY: &str = "an-operators-own-token-key-0123456789";

#[tokio::test]
async fn outside_local_mode_a_gateway_on_a_development_secret_exits_64_naming_it() {
    let (code, stderr) = start_outside_local_mode(&[
        ("SECKILL_ADMIN__TOKEN", "dev-admin-token"),
        ("SECKILL_TOKENS__KEYS__K1", OPERATORS_KEY),
    ])
    .await;
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("admin.token (SECKILL_ADMIN__TOKEN) is a development value"),
        "{stderr}"
    );
}

#[tokio::test]
async fn outside_local_mode_a_gateway_missing_a_secret_exits_64_instead_of_using_a_default() {
    // The Secret lost its admin token: nothing falls back to a value anyone knows.
    let (code, stderr) =
        start_outside_local_mode(&[("SECKILL_TOKENS__KEYS__K1", OPERATORS_KEY)]).await;
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("admin.token (SECKILL_ADMIN__TOKEN) is not set"),
        "{stderr}"
    );

    // A rotation that dropped k1 but still names it current: refused, not served by a
    // k1 from a config file.
    let (code, stderr) = start_outside_local_mode(&[
        ("SECKILL_ADMIN__TOKEN", OPERATORS_KEY),
        ("SECKILL_TOKENS__KEYS__K2", OPERATORS_KEY),
    ])
    .await;
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("tokens.current_key_id"), "{stderr}");
}

#[tokio::test]
async fn a_gateway_given_a_misspelt_setting_exits_64_naming_it_and_the_setting_meant() {
    let (code, stderr) = start_outside_local_mode(&[
        ("SECKILL_ADMIN__TOKEN", OPERATORS_KEY),
        ("SECKILL_TOKENS__KEYS__K1", OPERATORS_KEY),
        ("SECKILL_PAYMENTS__WEBHOOK_SECRET", OPERATORS_KEY),
        ("SECKILL_RATE_LIMIT__USER_BRUST", "50"),
    ])
    .await;
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("unknown setting `rate_limit.user_brust`")
            && stderr.contains("SECKILL_RATE_LIMIT__USER_BURST"),
        "{stderr}"
    );
}
