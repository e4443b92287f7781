//! The scripts are sent as EVALSHA; a Redis that forgot them (restart, fail-over, `SCRIPT
//! FLUSH`) answers NOSCRIPT, and the call loads the script and runs it once.

use domain::{Closing, PreDeductOutcome, UserId};
use stock_cache::{ReleaseOutcome, ReturnOutcome};
use test_support::redis::TestRedis;

use crate::helpers::{PRODUCT, assert_stock_is_conserved, open_sale, token};

async fn flush_scripts(redis: &TestRedis) {
    let mut conn = redis.connection().await;
    // Other tests on this server may lose their scripts too: they reload them the same way.
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[tokio::test]
async fn every_script_runs_after_redis_forgot_it() {
    let redis = TestRedis::new();
    let cache = redis.cache();

    flush_scripts(&redis).await;
    cache
        .load_product(PRODUCT, &open_sale(10, 2))
        .await
        .unwrap();

    let committed = token();
    flush_scripts(&redis).await;
    assert_eq!(
        cache.pre_deduct(&committed, UserId(1), 1).await.unwrap(),
        PreDeductOutcome::Reserved { stock_after: 9 }
    );

    flush_scripts(&redis).await;
    assert!(cache.confirm(&committed).await.unwrap());

    let released = token();
    cache.pre_deduct(&released, UserId(2), 1).await.unwrap();
    flush_scripts(&redis).await;
    assert_eq!(
        cache.release(&released, "send_failed").await.unwrap(),
        ReleaseOutcome::Released
    );

    flush_scripts(&redis).await;
    cache
        .mark_confirmed_until(&[(committed.clone(), 1_700_000_000_000)])
        .await
        .unwrap();
    flush_scripts(&redis).await;
    assert!(cache.mark_paid(&committed).await.unwrap());

    let returned = token();
    cache.pre_deduct(&returned, UserId(3), 1).await.unwrap();
    cache.confirm(&returned).await.unwrap();
    flush_scripts(&redis).await;
    assert_eq!(
        cache
            .return_units(&returned, Closing::Expired)
            .await
            .unwrap(),
        ReturnOutcome::Returned
    );

    assert_stock_is_conserved(cache, PRODUCT, 10).await;
    assert_eq!(cache.stock(PRODUCT).await.unwrap(), Some(9));
}
