//! A gateway whose Redis and MySQL are reached over TLS, as a managed Redis and MySQL
//! require: the local stack's TLS port and its MariaDB's TLS-only user, each with the run
//! folder's CA and a client certificate (see `test_support::tls`).

use reqwest::StatusCode;
use test_support::stack::TestStack;
use test_support::tls;

use crate::helpers::spawn_app_on;

#[tokio::test]
async fn a_gateway_on_redis_and_mysql_over_tls_defines_a_product_and_sells_it() {
    let stack = TestStack::new().await;
    let mysql_url = tls::mysql_url_as_tls_user(stack.db.url());
    let (ca, cert, key) = (
        tls::file("ca.pem"),
        tls::file("client.pem"),
        tls::file("client.key"),
    );
    let (ca, cert, key) = (
        ca.to_str().unwrap(),
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
    );
    let app = spawn_app_on(
        stack,
        &[
            ("SECKILL_REDIS__URL", &tls::redis_url()),
            ("SECKILL_REDIS__TLS_CA_FILE", ca),
            ("SECKILL_REDIS__TLS_CERT_FILE", cert),
            ("SECKILL_REDIS__TLS_KEY_FILE", key),
            ("SECKILL_MYSQL__URL", &mysql_url),
            ("SECKILL_MYSQL__SSL_MODE", "verify_identity"),
            ("SECKILL_MYSQL__SSL_CA_FILE", ca),
            ("SECKILL_MYSQL__SSL_CERT_FILE", cert),
            ("SECKILL_MYSQL__SSL_KEY_FILE", key),
        ],
    )
    .await;

    // MySQL first (the product's row), then Redis (its stock).
    app.open_sale(1, 1, 1).await;
    let token = app.token(42, 1).await;
    let bought = app.purchase(42, 1, &token, 1).await;
    assert_eq!(bought.status(), StatusCode::ACCEPTED);
    let ready = app
        .client
        .get(format!("{}/readyz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
}
