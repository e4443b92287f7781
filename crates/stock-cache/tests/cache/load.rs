//! `load_product.lua`, `restock.lua`, `forget_sale.lua`: a new sale forgets the last one
//! (and is refused while a unit is reserved), a rebuild keeps what a reload wrote back (and
//! is refused once the product is on sale again), a restock moves the stock left by the
//! change of initial stock in one step, and the epoch moves every time.

use domain::{PreDeductOutcome, ProductId, UserId};
use stock_cache::{CacheError, LoadMode, LoadSpec, ProductMeta, RestockOutcome, SaleTerms};
use test_support::redis::TestRedis;

use crate::helpers::{PRODUCT, lose_meta_and_stock, on_sale, open_sale, reserve, snapshot, token};

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

fn rebuild(initial_stock: i64, sellable_stock: i64) -> LoadSpec {
    LoadSpec {
        initial_stock,
        per_user_limit: 1,
        starts_at_ms: 0,
        ends_at_ms: 0,
        sellable_stock,
        mode: LoadMode::Rebuild,
    }
}

fn terms(initial_stock: i64, per_user_limit: u32) -> SaleTerms {
    SaleTerms {
        initial_stock,
        per_user_limit,
        starts_at_ms: 0,
        ends_at_ms: 0,
    }
}

#[tokio::test]
async fn a_rebuild_keeps_flows_buyers_results_and_tombstones() {
    let redis = a_sale_in_progress().await;
    let cache = redis.cache();
    lose_meta_and_stock(&redis).await;
    let before = snapshot(&redis, PRODUCT).await;

    let epoch = cache.load_product(PRODUCT, &rebuild(18, 15)).await.unwrap();

    assert_eq!(epoch, 1, "the epoch was lost with the meta");
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
async fn a_rebuild_or_its_first_step_is_refused_once_the_product_is_on_sale_again() {
    let redis = a_sale_in_progress().await;
    let cache = redis.cache();
    let before = snapshot(&redis, PRODUCT).await;

    assert!(matches!(
        cache.load_product(PRODUCT, &rebuild(18, 15)).await,
        Err(CacheError::AlreadyLoaded)
    ));
    assert!(matches!(
        cache.forget_sale_state(PRODUCT).await,
        Err(CacheError::AlreadyLoaded)
    ));
    assert_eq!(snapshot(&redis, PRODUCT).await, before);

    lose_meta_and_stock(&redis).await;
    cache.forget_sale_state(PRODUCT).await.unwrap();
    let forgotten = snapshot(&redis, PRODUCT).await;
    assert!(forgotten.flow.is_empty() && forgotten.users.is_empty() && forgotten.result.is_empty());
    assert_eq!(forgotten.tomb, before.tomb, "tombstones stay");
}

#[tokio::test]
async fn defining_a_new_sale_is_refused_while_a_unit_is_reserved() {
    let redis = a_sale_in_progress().await;
    let cache = redis.cache();
    let before = snapshot(&redis, PRODUCT).await;
    let define = LoadSpec {
        mode: LoadMode::Define,
        ..open_sale(20, 1)
    };

    assert!(matches!(
        cache.load_product(PRODUCT, &define).await,
        Err(CacheError::SaleRunning)
    ));
    assert_eq!(snapshot(&redis, PRODUCT).await, before);

    let idle = on_sale(5, 1).await;
    idle.cache().load_product(PRODUCT, &define).await.unwrap();
    assert_eq!(idle.cache().stock(PRODUCT).await.unwrap(), Some(20));
}

#[tokio::test]
async fn a_restock_moves_the_stock_left_by_the_change_of_initial_stock_and_keeps_the_sale() {
    let redis = a_sale_in_progress().await;
    let cache = redis.cache();
    // 10 units, 2 reserved (one confirmed), 1 released: 8 left.
    assert_eq!(cache.stock(PRODUCT).await.unwrap(), Some(8));
    let before = snapshot(&redis, PRODUCT).await;
    let epoch = cache.meta(PRODUCT).await.unwrap().unwrap().epoch;

    let grown = cache.restock(PRODUCT, &terms(25, 2)).await.unwrap();

    assert_eq!(
        grown,
        RestockOutcome::Restocked {
            delta: 15,
            stock: 23
        }
    );
    let after = snapshot(&redis, PRODUCT).await;
    assert_eq!(
        (&after.flow, &after.users, &after.result, &after.tomb),
        (&before.flow, &before.users, &before.result, &before.tomb)
    );
    assert_eq!(
        cache.meta(PRODUCT).await.unwrap(),
        Some(ProductMeta {
            initial_stock: 25,
            per_user_limit: 2,
            starts_at_ms: 0,
            ends_at_ms: 0,
            epoch: epoch + 1,
        })
    );
    // The new limit applies to the buyers of the running sale.
    reserve(cache, 1, 1).await;

    let shrunk = cache.restock(PRODUCT, &terms(4, 2)).await.unwrap();
    assert_eq!(
        shrunk,
        RestockOutcome::Restocked {
            delta: -21,
            stock: 1
        }
    );
    let flows = snapshot(&redis, PRODUCT).await.flow.len();
    assert_eq!(flows, 3, "the reserved units stay sold");
}

#[tokio::test]
async fn a_restock_to_fewer_units_than_are_reserved_is_refused_and_changes_nothing() {
    let redis = a_sale_in_progress().await;
    let cache = redis.cache();
    let before = snapshot(&redis, PRODUCT).await;

    let refused = cache.restock(PRODUCT, &terms(1, 5)).await.unwrap();

    assert_eq!(refused, RestockOutcome::BelowSold { sold: 2 });
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
    assert_eq!(
        cache.restock(PRODUCT, &terms(2, 1)).await.unwrap(),
        RestockOutcome::Restocked {
            delta: -8,
            stock: 0
        },
        "exactly the units reserved is allowed: nothing left on sale"
    );
}

#[tokio::test]
async fn a_restock_of_a_product_redis_lost_is_not_loaded_and_writes_nothing() {
    let redis = a_sale_in_progress().await;
    let cache = redis.cache();
    lose_meta_and_stock(&redis).await;
    let before = snapshot(&redis, PRODUCT).await;

    assert!(matches!(
        cache.restock(PRODUCT, &terms(20, 1)).await,
        Err(CacheError::NotLoaded)
    ));
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restocks_racing_purchases_count_every_reserved_unit_once() {
    let redis = on_sale(50, 1).await;
    let cache = redis.cache().clone();
    let buyers: Vec<_> = (1..=400_u64)
        .map(|user| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.pre_deduct(&token(), UserId(user), 1).await })
        })
        .collect();
    let mut initial = 50;
    for step in 1..=20_i64 {
        initial = 50 + 10 * step;
        let outcome = cache.restock(PRODUCT, &terms(initial, 1)).await.unwrap();
        assert!(
            matches!(outcome, RestockOutcome::Restocked { delta: 10, .. }),
            "{outcome:?}"
        );
        tokio::task::yield_now().await;
    }
    let mut reserved = 0;
    for buyer in buyers {
        if let PreDeductOutcome::Reserved { .. } = buyer.await.unwrap().unwrap() {
            reserved += 1;
        }
    }

    let stock = cache.stock(PRODUCT).await.unwrap().unwrap();
    let flows = i64::try_from(cache.flow_count(PRODUCT).await.unwrap()).unwrap();
    assert_eq!(flows, reserved);
    assert_eq!(
        stock + flows,
        initial,
        "Redis stock + Σ flows = initial stock"
    );
}

#[tokio::test]
async fn every_load_and_restock_moves_the_epoch() {
    let redis = TestRedis::new();
    let cache = redis.cache();
    let unloaded = ProductId(8);

    let mut epochs = Vec::new();
    for mode in [LoadMode::Fresh, LoadMode::Define] {
        let spec = LoadSpec {
            mode,
            ..open_sale(5, 1)
        };
        epochs.push(cache.load_product(PRODUCT, &spec).await.unwrap());
    }
    cache.restock(PRODUCT, &terms(9, 1)).await.unwrap();
    epochs.push(cache.meta(PRODUCT).await.unwrap().unwrap().epoch);

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
