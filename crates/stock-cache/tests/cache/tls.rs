//! `rediss://`: the cache over the local stack's TLS port, which presents a certificate of
//! the run folder's CA and asks every client for one of its own (see `test_support::tls`).

use std::time::Duration;

use futures::StreamExt;
use stock_cache::{OrderEvent, RedisSettings};
use test_support::redis::TestRedis;
use test_support::tls;

use crate::helpers::{PRODUCT, open_sale, reserve};

/// The test's own prefix (its keys go when `redis` is dropped), over the TLS port of the
/// same server.
fn over_tls(redis: &TestRedis) -> RedisSettings {
    RedisSettings {
        pool_size: 2,
        timeout_ms: 2000,
        tls_ca_file: Some(tls::file("ca.pem")),
        tls_cert_file: Some(tls::file("client.pem")),
        tls_key_file: Some(tls::file("client.key")),
        ..RedisSettings::standalone(tls::redis_url(), redis.prefix())
    }
}

#[tokio::test]
async fn with_the_ca_and_a_client_certificate_a_sale_runs_over_tls() {
    let redis = TestRedis::new();
    let cache = over_tls(&redis).open(2).unwrap();
    cache.ping().await.unwrap();
    cache.load_product(PRODUCT, &open_sale(2, 1)).await.unwrap();
    reserve(&cache, 1, 1).await;
    assert_eq!(cache.stock(PRODUCT).await.unwrap(), Some(1));
}

#[tokio::test]
async fn without_a_client_certificate_the_server_refuses_the_connection() {
    let redis = TestRedis::new();
    let settings = RedisSettings {
        tls_cert_file: None,
        tls_key_file: None,
        ..over_tls(&redis)
    };
    let cache = settings.open(1).unwrap();
    assert!(
        cache.ping().await.is_err(),
        "the TLS port asks for a client certificate"
    );
}

#[tokio::test]
async fn a_server_certificate_of_a_ca_the_client_does_not_trust_is_refused() {
    let redis = TestRedis::new();
    // The system's roots: the run folder's own CA is not among them.
    let settings = RedisSettings {
        tls_ca_file: None,
        ..over_tls(&redis)
    };
    let cache = settings.open(1).unwrap();
    assert!(
        cache.ping().await.is_err(),
        "the server's certificate must not be trusted"
    );
}

#[tokio::test]
async fn the_order_events_subscription_is_made_over_tls_too() {
    let redis = TestRedis::new();
    let cache = over_tls(&redis).open(1).unwrap();
    let events = cache.event_source().subscribe();
    tokio::pin!(events);
    let first = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("the subscription was made within 10 s");
    assert_eq!(first, Some(OrderEvent::Resubscribed));
}
