//! `load_product.lua`: a fresh sale forgets the last one, a restock keeps it, and the epoch
//! moves every time.

use domain::{PreDeductOutcome, ProductId, UserId};
use stock_cache::{LoadMode, LoadSpec, ProductMeta};
use test_support::redis::TestRedis;

use crate::helpers::{PRODUCT, on_sale, open_sale, reserve, snapshot, token};

/// A product with one of everything: a committed and confirmed order, a reserved flow, a
/// released token and a rolled-back one.
async fn a_sale_in_progress() -> TestRedis {
    let redis = on_sale(10, 1).await;
    let cache = redis.cache();
    let confirmed = reserve(cache, 1, 1).await;
    assert!(cache.confirm(&confirmed).await.unwrap());
    cache.mark_confirmed(&[confirmed]).await.unwrap();
    reserve(cache, 2, 1).await;
    let released = reserve(cache, 3, 1).await;
    cache.release(&released, "send_failed").await.unwrap();
    assert!(!cache.confirm(&token()).await.unwrap());

    let state = snapshot(&redis, PRODUCT).await;
    assert_eq!(
        (
            state.flow.len(),
            state.users.len(),
            state.result.len(),
            state.tomb.len()
        ),
        (2, 2, 1, 2)
    );
    redis
}

#[tokio::test]
async fn a_fresh_load_forgets_flows_buyers_results_and_tombstones() {
    let redis = a_sale_in_progress().await;
    let cache = redis.cache();
    let epoch = cache.meta(PRODUCT).await.unwrap().unwrap().epoch;
    let spec = LoadSpec {
        initial_stock: 20,
        per_user_limit: 2,
        starts_at_ms: 0,
        ends_at_ms: 0,
        sellable_stock: 20,
        mode: LoadMode::Fresh,
    };

    let new_epoch = cache.load_product(PRODUCT, &spec).await.unwrap();

    assert_eq!(new_epoch, epoch + 1);
    let state = snapshot(&redis, PRODUCT).await;
    assert!(state.flow.is_empty(), "{:?}", state.flow);
    assert!(state.users.is_empty(), "{:?}", state.users);
    assert!(state.result.is_empty(), "{:?}", state.result);
    assert!(state.tomb.is_empty(), "{:?}", state.tomb);
    assert_eq!(state.stock.as_deref(), Some("20"));
    assert_eq!(
        cache.meta(PRODUCT).await.unwrap(),
        Some(ProductMeta {
            initial_stock: 20,
            per_user_limit: 2,
            starts_at_ms: 0,
            ends_at_ms: 0,
            epoch: new_epoch,
        })
    );
    // The buyer of the last sale starts again from nothing.
    reserve(cache, 1, 2).await;
}

#[tokio::test]
async fn a_restock_keeps_flows_buyers_results_and_tombstones() {
    let redis = a_sale_in_progress().await;
    let cache = redis.cache();
    let before = snapshot(&redis, PRODUCT).await;
    let epoch = cache.meta(PRODUCT).await.unwrap().unwrap().epoch;
    let spec = LoadSpec {
        initial_stock: 18,
        per_user_limit: 1,
        starts_at_ms: 0,
        ends_at_ms: 0,
        sellable_stock: 15,
        mode: LoadMode::Restock,
    };

    let new_epoch = cache.load_product(PRODUCT, &spec).await.unwrap();

    assert_eq!(new_epoch, epoch + 1);
    let after = snapshot(&redis, PRODUCT).await;
    assert_eq!(
        (&after.flow, &after.users, &after.result, &after.tomb),
        (&before.flow, &before.users, &before.result, &before.tomb)
    );
    assert_eq!(after.stock.as_deref(), Some("15"));
    assert_eq!(
        cache.meta(PRODUCT).await.unwrap().unwrap().initial_stock,
        18
    );
    // Buyers of the running sale still count against their limit.
    assert_eq!(
        cache.pre_deduct(&token(), UserId(1), 1).await.unwrap(),
        PreDeductOutcome::LimitExceeded
    );
    reserve(cache, 4, 1).await;
}

#[tokio::test]
async fn every_load_moves_the_epoch() {
    let redis = TestRedis::new();
    let cache = redis.cache();
    let unloaded = ProductId(8);

    let mut epochs = Vec::new();
    for mode in [LoadMode::Fresh, LoadMode::Restock, LoadMode::Fresh] {
        let spec = LoadSpec {
            mode,
            ..open_sale(5, 1)
        };
        epochs.push(cache.load_product(PRODUCT, &spec).await.unwrap());
    }

    assert_eq!(epochs, vec![1, 2, 3]);
    assert_eq!(
        cache.epochs(&[PRODUCT, unloaded, PRODUCT]).await.unwrap(),
        vec![Some(3), None, Some(3)]
    );
    assert_eq!(cache.epochs(&[]).await.unwrap(), Vec::<Option<i64>>::new());
}

#[tokio::test]
async fn meta_reports_the_sale_as_loaded() {
    let redis = TestRedis::new();
    let cache = redis.cache();
    let spec = LoadSpec {
        initial_stock: 1_000,
        per_user_limit: 4,
        starts_at_ms: 1_700_000_000_000,
        ends_at_ms: 1_700_000_600_000,
        sellable_stock: 990,
        mode: LoadMode::Fresh,
    };

    let epoch = cache.load_product(PRODUCT, &spec).await.unwrap();

    assert_eq!(
        cache.meta(PRODUCT).await.unwrap(),
        Some(ProductMeta {
            initial_stock: 1_000,
            per_user_limit: 4,
            starts_at_ms: 1_700_000_000_000,
            ends_at_ms: 1_700_000_600_000,
            epoch,
        })
    );
    assert_eq!(cache.stock(PRODUCT).await.unwrap(), Some(990));
}
