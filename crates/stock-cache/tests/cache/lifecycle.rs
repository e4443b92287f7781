//! After the purchase: a confirmed order's status as Redis keeps it, and the units of an
//! order MySQL closed unpaid going back to the sale, at most once.

use domain::{Closing, OrderStatus, OrderToken, PreDeductOutcome, UserId};
use stock_cache::{OrderToRestore, RestoredOrder, ReturnOutcome, StockCache};
use test_support::redis::TestRedis;

use crate::helpers::{
    PRODUCT, assert_stock_is_conserved, lose_meta_and_stock, now_ms, on_sale, open_sale, reserve,
    snapshot, token,
};

/// A pay_by far enough ahead not to matter to these tests.
fn pay_by() -> i64 {
    now_ms() + 15 * 60 * 1000
}

/// A new order of `quantity` for `user`, reserved, committed and written to MySQL.
async fn confirmed_order(cache: &StockCache, user: u64, quantity: u32) -> OrderToken {
    let token = reserve(cache, user, quantity).await;
    assert!(cache.confirm(&token).await.unwrap());
    assert_eq!(
        cache
            .mark_confirmed_until(&[(token.clone(), pay_by())])
            .await
            .unwrap(),
        1
    );
    token
}

async fn epoch(cache: &StockCache) -> i64 {
    cache.meta(PRODUCT).await.unwrap().unwrap().epoch
}

#[tokio::test]
async fn a_cancelled_order_gives_its_units_back_once() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let order = confirmed_order(cache, 1, 2).await;
    let kept = confirmed_order(cache, 2, 1).await;
    let epoch_before = epoch(cache).await;

    let outcome = cache
        .return_units(&order, Closing::Cancelled)
        .await
        .unwrap();

    assert_eq!(outcome, ReturnOutcome::Returned);
    assert_eq!(cache.stock(PRODUCT).await.unwrap(), Some(9));
    let after = snapshot(&redis, PRODUCT).await;
    assert_eq!(after.users, [("2".to_owned(), "1".to_owned())].into());
    assert_eq!(after.result[&order.to_string()], "cancelled");
    assert_eq!(epoch(cache).await, epoch_before + 1, "the epoch moved");
    let view = cache.order_view(&order).await.unwrap();
    assert_eq!(view.flow, None, "the flow left for the tombstone");
    assert_eq!(view.status, Some(OrderStatus::Cancelled));
    let tomb = view.tombstone.unwrap();
    assert_eq!((tomb.user_id, tomb.quantity), (Some(UserId(1)), Some(2)));
    assert_eq!(tomb.closing(), Some(Closing::Cancelled));
    assert_eq!(tomb.status(), OrderStatus::Cancelled);
    assert!(cache.order_view(&kept).await.unwrap().flow.is_some());
    assert_stock_is_conserved(cache, PRODUCT, 10).await;
}

#[tokio::test]
async fn a_second_return_answers_already_returned_and_changes_nothing() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let order = confirmed_order(cache, 1, 2).await;
    cache.return_units(&order, Closing::Expired).await.unwrap();
    let before = snapshot(&redis, PRODUCT).await;

    for why in [Closing::Expired, Closing::Cancelled] {
        assert_eq!(
            cache.return_units(&order, why).await.unwrap(),
            ReturnOutcome::AlreadyReturned
        );
    }

    assert_eq!(snapshot(&redis, PRODUCT).await, before);
    let view = cache.order_view(&order).await.unwrap();
    assert_eq!(view.status, Some(OrderStatus::Expired));
    assert_eq!(view.tombstone.unwrap().status(), OrderStatus::Expired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_concurrent_returns_of_one_order_return_it_once() {
    const INITIAL: i64 = 10;
    let redis = on_sale(INITIAL, 3).await;
    let cache = redis.cache();
    let order = confirmed_order(cache, 1, 3).await;
    let _other = confirmed_order(cache, 2, 1).await;
    let epoch_before = epoch(cache).await;

    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let (cache, order) = (cache.clone(), order.clone());
            let why = if i % 2 == 0 {
                Closing::Cancelled
            } else {
                Closing::Expired
            };
            tokio::spawn(async move { cache.return_units(&order, why).await })
        })
        .collect();
    let mut returned = 0;
    for task in tasks {
        match task.await.unwrap().unwrap() {
            ReturnOutcome::Returned => returned += 1,
            ReturnOutcome::AlreadyReturned => {}
            other => panic!("{other:?}"),
        }
    }

    assert_eq!(returned, 1);
    assert_eq!(cache.stock(PRODUCT).await.unwrap(), Some(INITIAL - 1));
    assert_eq!(epoch(cache).await, epoch_before + 1);
    assert_eq!(
        snapshot(&redis, PRODUCT).await.users,
        [("2".to_owned(), "1".to_owned())].into()
    );
    assert_stock_is_conserved(cache, PRODUCT, INITIAL).await;
}

#[tokio::test]
async fn returning_on_a_product_redis_lost_changes_nothing() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let order = confirmed_order(cache, 1, 2).await;
    lose_meta_and_stock(&redis).await;
    let before = snapshot(&redis, PRODUCT).await;

    let outcome = cache
        .return_units(&order, Closing::Cancelled)
        .await
        .unwrap();

    assert_eq!(outcome, ReturnOutcome::NotLoaded);
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
}

#[tokio::test]
async fn returning_on_a_product_never_loaded_changes_nothing() {
    let redis = TestRedis::new();

    let outcome = redis
        .cache()
        .return_units(&token(), Closing::Expired)
        .await
        .unwrap();

    assert_eq!(outcome, ReturnOutcome::NotLoaded);
    assert_eq!(redis.keys().unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn an_order_whose_units_redis_does_not_hold_is_not_returned() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let released = reserve(cache, 1, 1).await;
    cache.release(&released, "send_failed").await.unwrap();
    let before = snapshot(&redis, PRODUCT).await;

    for order in [&token(), &released] {
        assert_eq!(
            cache.return_units(order, Closing::Cancelled).await.unwrap(),
            ReturnOutcome::NotHeld,
            "{order}"
        );
    }

    assert_eq!(snapshot(&redis, PRODUCT).await, before);
    let tomb = cache
        .order_view(&released)
        .await
        .unwrap()
        .tombstone
        .unwrap();
    assert_eq!(tomb.status(), OrderStatus::Failed, "a failed reservation");
}

#[tokio::test]
async fn the_returned_unit_can_be_bought_again_by_another_buyer() {
    let redis = on_sale(1, 1).await;
    let cache = redis.cache();
    let order = confirmed_order(cache, 1, 1).await;
    assert!(matches!(
        cache.pre_deduct(&token(), UserId(2), 1).await.unwrap(),
        PreDeductOutcome::SoldOut { .. }
    ));

    cache.return_units(&order, Closing::Expired).await.unwrap();

    assert_eq!(
        cache.pre_deduct(&token(), UserId(2), 1).await.unwrap(),
        PreDeductOutcome::Reserved { stock_after: 0 }
    );
    assert_eq!(
        cache.pre_deduct(&order, UserId(1), 1).await.unwrap(),
        PreDeductOutcome::Duplicate,
        "the returned order's token never reserves again"
    );
    assert_stock_is_conserved(cache, PRODUCT, 1).await;
}

#[tokio::test]
async fn a_confirmed_order_shows_its_deadline() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let order = reserve(cache, 1, 1).await;
    cache.confirm(&order).await.unwrap();
    let deadline = pay_by();

    cache
        .mark_confirmed_until(&[(order.clone(), deadline)])
        .await
        .unwrap();

    let view = cache.order_view(&order).await.unwrap();
    assert!(view.confirmed);
    assert_eq!(view.status, Some(OrderStatus::Confirmed));
    assert_eq!(view.pay_by_ms, Some(deadline));
}

#[tokio::test]
async fn marking_confirmed_again_changes_nothing_and_keeps_a_known_deadline() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let order = reserve(cache, 1, 1).await;
    cache.confirm(&order).await.unwrap();
    let deadline = pay_by();
    let once = [(order.clone(), deadline)];
    assert_eq!(cache.mark_confirmed_until(&once).await.unwrap(), 1);

    assert_eq!(cache.mark_confirmed_until(&once).await.unwrap(), 0);
    cache
        .mark_confirmed(std::slice::from_ref(&order))
        .await
        .unwrap();

    assert_eq!(
        cache.order_view(&order).await.unwrap().pay_by_ms,
        Some(deadline)
    );
}

#[tokio::test]
async fn a_bare_confirmation_gains_its_deadline_when_one_is_known() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let order = reserve(cache, 1, 1).await;
    cache.confirm(&order).await.unwrap();
    cache
        .mark_confirmed(std::slice::from_ref(&order))
        .await
        .unwrap();
    let bare = cache.order_view(&order).await.unwrap();
    assert_eq!(
        (bare.status, bare.pay_by_ms),
        (Some(OrderStatus::Confirmed), None)
    );
    let deadline = pay_by();

    let changed = cache
        .mark_confirmed_until(&[(order.clone(), deadline)])
        .await
        .unwrap();

    assert_eq!(changed, 1);
    assert_eq!(
        cache.order_view(&order).await.unwrap().pay_by_ms,
        Some(deadline)
    );
}

#[tokio::test]
async fn a_paid_or_returned_order_is_never_marked_confirmed_again() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let paid = confirmed_order(cache, 1, 1).await;
    assert!(cache.mark_paid(&paid).await.unwrap());
    let cancelled = confirmed_order(cache, 2, 1).await;
    cache
        .return_units(&cancelled, Closing::Cancelled)
        .await
        .unwrap();
    let before = snapshot(&redis, PRODUCT).await;

    // A redelivered batch marks its orders again.
    let again = [(paid.clone(), pay_by()), (cancelled.clone(), pay_by())];
    assert_eq!(cache.mark_confirmed_until(&again).await.unwrap(), 0);
    cache
        .mark_confirmed(&[paid.clone(), cancelled.clone()])
        .await
        .unwrap();

    assert_eq!(snapshot(&redis, PRODUCT).await, before);
    let paid = cache.order_view(&paid).await.unwrap();
    assert_eq!(
        (paid.status, paid.confirmed),
        (Some(OrderStatus::Paid), true)
    );
    assert_eq!(
        cache.order_view(&cancelled).await.unwrap().status,
        Some(OrderStatus::Cancelled)
    );
}

#[tokio::test]
async fn a_returned_order_whose_result_was_lost_is_not_marked_confirmed() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let order = confirmed_order(cache, 1, 1).await;
    cache.return_units(&order, Closing::Expired).await.unwrap();
    let keys = cache.keys(PRODUCT);
    assert!(
        redis
            .delete_field(&keys.result, &order.to_string())
            .unwrap()
    );

    let changed = cache
        .mark_confirmed_until(&[(order.clone(), pay_by())])
        .await
        .unwrap();

    assert_eq!(changed, 0, "the tombstone says its units went back");
    assert_eq!(redis.field(&keys.result, &order.to_string()).unwrap(), None);
}

#[tokio::test]
async fn marking_paid_twice_records_it_once() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let order = confirmed_order(cache, 1, 1).await;

    assert!(cache.mark_paid(&order).await.unwrap());
    assert!(!cache.mark_paid(&order).await.unwrap());

    let view = cache.order_view(&order).await.unwrap();
    assert_eq!(
        (view.status, view.pay_by_ms),
        (Some(OrderStatus::Paid), None)
    );
    assert!(view.flow.is_some(), "a paid order keeps its units");
}

#[tokio::test]
async fn a_rebuild_restores_open_and_paid_orders_and_not_the_units_of_returned_ones() {
    let redis = on_sale(10, 3).await;
    let cache = redis.cache();
    let (open, paid, cancelled, expired) = (token(), token(), token(), token());
    let deadline = pay_by();
    let restore = |token: &OrderToken, user, quantity, status, pay_by_ms| OrderToRestore {
        order: RestoredOrder {
            order_token: token.to_string(),
            user_id: UserId(user),
            quantity,
            reserved_at_ms: 1_700_000_000_000,
        },
        status,
        pay_by_ms,
    };
    lose_meta_and_stock(&redis).await;
    cache.forget_sale_state(PRODUCT).await.unwrap();

    cache
        .restore_order_states(
            PRODUCT,
            &[
                restore(&open, 1, 2, OrderStatus::Confirmed, Some(deadline)),
                restore(&paid, 2, 1, OrderStatus::Paid, Some(deadline)),
                restore(&cancelled, 1, 1, OrderStatus::Cancelled, Some(deadline)),
                restore(&expired, 3, 3, OrderStatus::Expired, Some(deadline)),
            ],
        )
        .await
        .unwrap();
    // MySQL's stock: 10, less the open and the paid orders' units.
    let mut rebuild = open_sale(10, 3);
    rebuild.sellable_stock = 7;
    rebuild.mode = stock_cache::LoadMode::Rebuild;
    cache.load_product(PRODUCT, &rebuild).await.unwrap();

    let after = snapshot(&redis, PRODUCT).await;
    assert_eq!(
        after.flow.len(),
        2,
        "only the open and the paid order hold units"
    );
    assert_eq!(
        after.users,
        [
            ("1".to_owned(), "2".to_owned()),
            ("2".to_owned(), "1".to_owned())
        ]
        .into()
    );
    let view = cache.order_view(&open).await.unwrap();
    assert_eq!(
        (view.status, view.pay_by_ms),
        (Some(OrderStatus::Confirmed), Some(deadline))
    );
    let view = cache.order_view(&paid).await.unwrap();
    assert_eq!(
        (view.status, view.pay_by_ms),
        (Some(OrderStatus::Paid), None)
    );
    for (order, closing) in [
        (&cancelled, Closing::Cancelled),
        (&expired, Closing::Expired),
    ] {
        let view = cache.order_view(order).await.unwrap();
        assert_eq!(view.flow, None);
        assert_eq!(view.status, Some(closing.status()));
        assert_eq!(view.tombstone.unwrap().closing(), Some(closing));
        assert_eq!(
            cache.return_units(order, closing).await.unwrap(),
            ReturnOutcome::AlreadyReturned
        );
    }
    assert_stock_is_conserved(cache, PRODUCT, 10).await;
}
