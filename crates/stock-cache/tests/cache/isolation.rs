//! The test helper itself: a prefix per test, and nothing left behind.

use domain::UserId;
use test_support::redis::TestRedis;

use crate::helpers::{PRODUCT, on_sale, reserve};

#[tokio::test]
async fn two_tests_on_the_same_product_id_never_see_each_other() {
    let first = on_sale(1, 1).await;
    let second = TestRedis::new();

    reserve(first.cache(), 1, 1).await;

    assert_ne!(first.prefix(), second.prefix());
    assert_eq!(second.cache().stock(PRODUCT).await.unwrap(), None);
    assert_eq!(
        second
            .cache()
            .pre_deduct(&crate::helpers::token(), UserId(1), 1)
            .await
            .unwrap(),
        domain::PreDeductOutcome::NotLoaded
    );
}

#[tokio::test]
async fn a_test_redis_deletes_its_keys_when_dropped() {
    let redis = on_sale(10, 1).await;
    let cache = redis.cache();
    let kept = reserve(cache, 1, 1).await;
    cache.mark_confirmed(&[kept]).await.unwrap();
    let released = reserve(cache, 2, 1).await;
    cache.release(&released, "send_failed").await.unwrap();
    let keys = redis.keys().unwrap();
    assert_eq!(
        keys.len(),
        6,
        "meta, stock, flow, users, result, tomb: {keys:?}"
    );
    assert!(
        keys.iter()
            .all(|key| key.starts_with(&format!("{{{}:", redis.prefix())))
    );
    let (url, prefix) = (redis.url().to_owned(), redis.prefix().to_owned());

    drop(redis);

    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for key in keys {
        let exists: bool = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!exists, "{key} of {prefix} outlived its TestRedis");
    }
}
