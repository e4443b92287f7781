//! Every malformed request gets the API's error JSON with a 4xx and changes nothing.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{ADMIN, assert_error, spawn_app};

#[tokio::test]
async fn malformed_purchases_are_bad_requests_and_take_no_stock() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 2).await;
    let token = app.token(7, 1).await;

    let cases = [
        ("1", json!({"token": token, "quantity": 0})),
        ("1", json!({"token": token, "quantity": -1})),
        ("1", json!({"token": token, "quantity": "1"})),
        ("1", json!({"token": token, "quantity": 1.5})),
        ("1", json!({"token": token, "quantity": 4_294_967_296u64})),
        ("1", json!({"token": token})),
        ("1", json!({"token": 12, "quantity": 1})),
        ("1", json!([1, 2])),
        ("1", json!({"token": token, "quantity": 3})),
        ("abc", json!({"token": token, "quantity": 1})),
        ("-1", json!({"token": token, "quantity": 1})),
        (
            "18446744073709551616",
            json!({"token": token, "quantity": 1}),
        ),
    ];
    for (product, body) in cases {
        let response = app.purchase_raw(7, product, body.clone()).await;
        assert_eq!(
            response.status(),
            StatusCode::BAD_REQUEST,
            "{product} {body}"
        );
        let json: serde_json::Value = response.json().await.unwrap();
        assert_eq!(json["error"]["code"], "BAD_REQUEST", "{product} {body}");
    }
    app.assert_nothing_taken(1, 5).await;
    // The token was never spent by any of them.
    assert_eq!(
        app.purchase(7, 1, &token, 1).await.status(),
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn a_body_that_is_not_json_is_a_bad_request() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    let response = app
        .client
        .post(format!("{}/api/v1/products/1/purchase", app.address))
        .header("X-User-Id", "7")
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_error(response, StatusCode::BAD_REQUEST, "BAD_REQUEST").await;
}

#[tokio::test]
async fn a_body_over_the_cap_is_a_413_payload_too_large_and_changes_nothing() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    let token = app.token(7, 1).await;
    // Just over `gateway.max_body_bytes` (4096), and far over it.
    for padding in [4_100, 1 << 20] {
        let oversized = json!({"token": token, "quantity": 1, "pad": "x".repeat(padding)});
        assert_error(
            app.purchase_raw(7, "1", oversized).await,
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
        )
        .await;
    }
    let restock = json!({"name": "x".repeat(5_000), "stock": 99, "per_user_limit": 1,
                         "force": true});
    assert_error(
        app.put_product(1, restock).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "PAYLOAD_TOO_LARGE",
    )
    .await;
    let view = app.admin_view(1).await;
    assert_eq!(view["initial_stock"], 5);
    assert_eq!(view["redis_stock"], 5);
    assert_eq!(view["flows"], 0);
    // The token was not spent by the refused purchases.
    assert_eq!(
        app.purchase(7, 1, &token, 1).await.status(),
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn forged_expired_and_foreign_tokens_are_invalid() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    app.open_sale(2, 5, 1).await;
    let token = app.token(7, 1).await;

    let mut forged = token.clone();
    forged.pop();
    forged.push(if token.ends_with('A') { 'B' } else { 'A' });
    for (user, product, token) in [
        (7, 1, forged.as_str()),
        (7, 1, "v1.k1.garbage.garbage"),
        (7, 1, ""),
        (8, 1, token.as_str()),
        (7, 2, token.as_str()),
    ] {
        assert_error(
            app.purchase(user, product, token, 1).await,
            StatusCode::FORBIDDEN,
            "INVALID_TOKEN",
        )
        .await;
    }
    assert_eq!(app.admin_view(1).await["redis_stock"], 5);
}

#[tokio::test]
async fn an_expired_token_is_invalid() {
    let app = crate::helpers::spawn_app_with(&[("SECKILL_TOKENS__TTL_SECS", "0")]).await;
    app.open_sale(1, 5, 1).await;
    let token = app.token(7, 1).await;
    assert_error(
        app.purchase(7, 1, &token, 1).await,
        StatusCode::FORBIDDEN,
        "INVALID_TOKEN",
    )
    .await;
}

#[tokio::test]
async fn unknown_routes_answer_the_api_404() {
    let app = spawn_app().await;
    let response = app
        .client
        .get(format!("{}/no/such/route", app.address))
        .send()
        .await
        .unwrap();
    assert_error(response, StatusCode::NOT_FOUND, "NOT_FOUND").await;
}

#[tokio::test]
async fn a_sale_time_outside_what_mysql_holds_is_a_bad_request_not_a_503() {
    // Found by deploy/test/schemathesis.sh: these were answered 503 "MySQL cannot be
    // reached" (the store refused the DATETIME) while MySQL was fine.
    let app = spawn_app().await;
    for (field, at) in [
        ("starts_at", "0999-12-31T23:59:59Z"),
        ("ends_at", "0500-01-01T00:00:00Z"),
        // Year 9999 as written, 10000 in UTC.
        ("ends_at", "9999-12-31T23:00:00-05:00"),
    ] {
        let response = app
            .put_product(
                1,
                json!({"name": "x", "stock": 5, "per_user_limit": 1, field: at}),
            )
            .await;
        assert_error(response, StatusCode::BAD_REQUEST, "BAD_REQUEST").await;
    }
    let response = app
        .client
        .get(format!("{}/admin/v1/products/1", app.address))
        .bearer_auth(crate::helpers::ADMIN)
        .send()
        .await
        .unwrap();
    assert_error(response, StatusCode::NOT_FOUND, "NOT_FOUND").await;
}

#[tokio::test]
async fn whole_numbers_written_with_a_fraction_part_are_accepted_others_are_not() {
    // The document says `integer`, and JSON Schema counts 5.0 as one (found by
    // deploy/test/schemathesis.sh): 400 for it would refuse what the document allows.
    let app = spawn_app().await;
    let response = app
        .put_product(1, json!({"name": "x", "stock": 5.0, "per_user_limit": 2e0}))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let product = crate::helpers::body(response).await;
    assert_eq!(product["stock"], 5);
    assert_eq!(product["per_user_limit"], 2);

    for body in [
        json!({"name": "x", "stock": 5.5, "per_user_limit": 1}),
        json!({"name": "x", "stock": 5, "per_user_limit": 4_294_967_296.0}),
        json!({"name": "x", "stock": 5, "per_user_limit": -1.0}),
        json!({"name": "x", "stock": "5", "per_user_limit": 1}),
        json!({"name": "x", "stock": 1e300, "per_user_limit": 1}),
    ] {
        assert_error(
            app.put_product(2, body.clone()).await,
            StatusCode::BAD_REQUEST,
            "BAD_REQUEST",
        )
        .await;
    }
}

#[tokio::test]
async fn oversized_or_too_many_headers_are_refused_and_change_nothing() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    let token = app.token(7, 1).await;
    let purchase = || {
        app.client
            .post(format!("{}/api/v1/products/1/purchase", app.address))
            .header("X-User-Id", "7")
            .json(&json!({"token": token, "quantity": 1}))
    };

    // One header far over `gateway.max_header_bytes` (8 KiB), and a block just over it
    // made of headers each well under it.
    let huge = purchase()
        .header("X-Padding", "x".repeat(64 * 1024))
        .send()
        .await
        .expect("an answer, not a dropped connection");
    assert_error(
        huge,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "HEADERS_TOO_LARGE",
    )
    .await;
    let mut over = purchase();
    for i in 0..3 {
        over = over.header(format!("X-Padding-{i}"), "x".repeat(3_000));
    }
    assert_error(
        over.send().await.expect("an answer"),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "HEADERS_TOO_LARGE",
    )
    .await;

    let mut many = purchase();
    for i in 0..200 {
        many = many.header(format!("X-Extra-{i}"), "1");
    }
    let many = many.send().await.expect("an answer");
    assert_eq!(many.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);

    app.assert_nothing_taken(1, 5).await;
}

#[tokio::test]
#[ignore = "defect: more than 96 headers (a 3 KB block, under the 8 KiB cap) are refused by \
            actix-web's HTTP/1 parser itself: 431 with an empty body, not the error JSON"]
async fn too_many_headers_are_a_431_with_the_error_json() {
    let app = spawn_app().await;
    let mut many = app
        .client
        .post(format!("{}/api/v1/products/1/tokens", app.address))
        .header("X-User-Id", "7");
    for i in 0..200 {
        many = many.header(format!("X-Extra-{i}"), "1");
    }
    assert_error(
        many.send().await.expect("an answer"),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "HEADERS_TOO_LARGE",
    )
    .await;
}

#[tokio::test]
async fn ids_that_are_not_u64_are_bad_requests_on_every_path_that_takes_one() {
    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    let definition = json!({"name": "phone", "stock": 9, "per_user_limit": 1, "force": true});
    for id in ["abc", "-1", "18446744073709551616"] {
        let token = app
            .client
            .post(format!("{}/api/v1/products/{id}/tokens", app.address))
            .header("X-User-Id", "7")
            .send()
            .await
            .unwrap();
        assert_error(token, StatusCode::BAD_REQUEST, "BAD_REQUEST").await;

        let admin = format!("{}/admin/v1/products/{id}", app.address);
        let get = app
            .client
            .get(&admin)
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_error(get, StatusCode::BAD_REQUEST, "BAD_REQUEST").await;
        let put = app
            .client
            .put(&admin)
            .bearer_auth(ADMIN)
            .json(&definition)
            .send()
            .await
            .unwrap();
        assert_error(put, StatusCode::BAD_REQUEST, "BAD_REQUEST").await;
        let reload = app
            .client
            .post(format!("{admin}/reload"))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_error(reload, StatusCode::BAD_REQUEST, "BAD_REQUEST").await;
    }
    let view = app.admin_view(1).await;
    assert_eq!(view["initial_stock"], 5);
    assert_eq!(view["redis_stock"], 5);
    assert_eq!(view["flows"], 0);
}

#[tokio::test]
async fn a_token_whose_well_formed_signature_is_wrong_is_invalid_and_reserves_nothing() {
    use jsonwebtoken::{Algorithm, EncodingKey, crypto::sign};

    let app = spawn_app().await;
    app.open_sale(1, 5, 1).await;
    let token = app.token(7, 1).await;
    // `v2.<key id>.<payload>.<HMAC-SHA256 of the rest, URL-safe base64>`.
    let (signed, signature) = token.rsplit_once('.').expect("a signed token");
    let hmac = |key: &str| {
        sign(
            signed.as_bytes(),
            &EncodingKey::from_secret(key.as_bytes()),
            Algorithm::HS256,
        )
        .unwrap()
    };
    // The construction is the gateway's own: with the configured key it gives its signature.
    assert_eq!(hmac("dev-token-key-change-me"), signature);

    let resigned = format!("{signed}.{}", hmac("another-token-key-of-length"));
    // One character in the middle of the signature: still base64 of 32 bytes.
    let mut flipped: Vec<char> = signature.chars().collect();
    let middle = flipped.len() / 2;
    flipped[middle] = if flipped[middle] == 'A' { 'B' } else { 'A' };
    let flipped = format!("{signed}.{}", flipped.into_iter().collect::<String>());
    for forged in [resigned, flipped] {
        assert_ne!(forged, token);
        assert_error(
            app.purchase(7, 1, &forged, 1).await,
            StatusCode::FORBIDDEN,
            "INVALID_TOKEN",
        )
        .await;
    }
    app.assert_nothing_taken(1, 5).await;
    // The order the forgeries named was not reserved, nor its token burnt.
    assert_eq!(
        app.purchase(7, 1, &token, 1).await.status(),
        StatusCode::ACCEPTED
    );
}
