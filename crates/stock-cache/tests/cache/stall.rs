//! A Redis that stops answering (here: its process stopped with SIGSTOP) still takes in what
//! is sent to it, and runs it once it goes on. A pre-deduct whose answer never came may
//! therefore reserve after its caller gave up on it.

use std::time::Duration;

use domain::{OrderToken, PreDeductOutcome, UserId};
use stock_cache::{CacheError, ReleaseOutcome, StockCache};
use test_support::redis::{PrivateRedis, TestRedis};

use crate::helpers::{PRODUCT, assert_stock_is_conserved, open_sale, snapshot, token};

const IMPATIENT: Duration = Duration::from_millis(300);

/// A sale of 10 on a server of the test's own, and a cache on it that gives up after
/// [`IMPATIENT`] (or `timeout`), with its one connection open and pre_deduct.lua loaded (by a purchase
/// above the per-user limit, which changes nothing), as on a server in steady use: there an
/// unanswered EVALSHA runs later, where on a fresh server it would only fail NOSCRIPT.
async fn sale_on_a_private_server() -> (PrivateRedis, TestRedis, StockCache) {
    sale_on_a_private_server_with(IMPATIENT).await
}

async fn sale_on_a_private_server_with(timeout: Duration) -> (PrivateRedis, TestRedis, StockCache) {
    let server = PrivateRedis::start().await;
    let redis = TestRedis::on(&server.url());
    redis
        .cache()
        .load_product(PRODUCT, &open_sale(10, 1))
        .await
        .unwrap();
    let impatient = StockCache::new(&server.url(), 1, redis.prefix(), timeout).unwrap();
    assert_eq!(
        impatient.pre_deduct(&token(), UserId(2), 2).await.unwrap(),
        PreDeductOutcome::QuantityAboveLimit
    );
    (server, redis, impatient)
}

async fn has_flow(redis: &TestRedis, token: &OrderToken) -> bool {
    redis
        .cache()
        .order_view(token)
        .await
        .unwrap()
        .flow
        .is_some()
}

#[tokio::test]
async fn a_pre_deduct_sent_to_a_stalled_redis_is_unanswered_and_reserves_once_redis_goes_on() {
    let (server, redis, impatient) = sale_on_a_private_server().await;
    let token = token();

    server.freeze();
    let unanswered = impatient.pre_deduct(&token, UserId(1), 1).await;
    server.thaw();

    let error = unanswered.unwrap_err();
    assert!(
        matches!(error, CacheError::Unanswered(after) if after == IMPATIENT),
        "{error:?}"
    );
    assert!(error.may_have_run());
    // What the caller must not take for "nothing happened": the script runs after all, once
    // Redis reads its connection (the order in which it serves connections is its own).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !has_flow(&redis, &token).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the unanswered pre-deduct never reserved"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_stock_is_conserved(redis.cache(), PRODUCT, 10).await;

    assert_eq!(
        redis
            .cache()
            .release(&token, "pre_deduct_unanswered")
            .await
            .unwrap(),
        ReleaseOutcome::Released
    );
    let after = snapshot(&redis, PRODUCT).await;
    assert_eq!(after.stock.as_deref(), Some("10"));
    assert!(after.flow.is_empty() && after.users.is_empty());
    assert_eq!(
        redis
            .cache()
            .pre_deduct(&token, UserId(1), 1)
            .await
            .unwrap(),
        PreDeductOutcome::Duplicate,
        "the token, given back, cannot reserve again"
    );
}

#[tokio::test]
async fn a_pre_deduct_that_never_got_a_connection_to_a_stalled_redis_did_not_run() {
    let (server, redis, _) = sale_on_a_private_server().await;
    // A pool whose first connection must be opened while the server is stalled: the
    // connection's own handshake gets no answer, so the script is never sent.
    let cold = StockCache::new(&server.url(), 1, redis.prefix(), IMPATIENT).unwrap();
    let token = token();

    server.freeze();
    let refused = cold.pre_deduct(&token, UserId(1), 1).await;
    server.thaw();

    let error = refused.unwrap_err();
    assert!(matches!(error, CacheError::Timeout(_)), "{error:?}");
    assert!(!error.may_have_run());
    assert!(!has_flow(&redis, &token).await);
    assert_eq!(snapshot(&redis, PRODUCT).await.stock.as_deref(), Some("10"));
}

#[tokio::test]
async fn a_call_to_a_stalled_redis_waits_the_caches_timeout_not_the_clients_own_500_ms() {
    let patient = Duration::from_millis(1200);
    let (server, _redis, cache) = sale_on_a_private_server_with(patient).await;

    server.freeze();
    let started = std::time::Instant::now();
    let unanswered = cache.pre_deduct(&token(), UserId(1), 1).await;
    let waited = started.elapsed();
    server.thaw();

    let error = unanswered.unwrap_err();
    assert!(
        matches!(error, CacheError::Unanswered(after) if after == patient),
        "{error:?}"
    );
    assert!(
        waited >= patient - Duration::from_millis(50),
        "gave up after {waited:?}, before the cache's {patient:?}: {error:?}"
    );
}
