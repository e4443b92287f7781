//! What `pre_deduct.lua` answers, and that only a reservation writes anything.

use domain::{FlowRecord, FlowState, PreDeductOutcome, ProductId, UserId};
use redis::AsyncCommands;
use stock_cache::LoadSpec;
use test_support::redis::TestRedis;

use crate::helpers::{PRODUCT, now_ms, on_sale, open_sale, reserve, snapshot, token};

#[tokio::test]
async fn a_product_that_was_never_loaded_answers_not_loaded_and_writes_nothing() {
    let redis = TestRedis::new();
    let cache = redis.cache();

    let outcome = cache.pre_deduct(&token(), UserId(1), 1).await.unwrap();

    assert_eq!(outcome, PreDeductOutcome::NotLoaded);
    assert_eq!(cache.stock(PRODUCT).await.unwrap(), None);
    assert_eq!(cache.meta(PRODUCT).await.unwrap(), None);
    assert_eq!(cache.epochs(&[PRODUCT]).await.unwrap(), vec![None]);
    assert_eq!(cache.flow_count(PRODUCT).await.unwrap(), 0);
    assert!(redis.keys().unwrap().is_empty(), "{:?}", redis.keys());
}

#[tokio::test]
async fn a_product_that_lost_its_meta_answers_not_loaded_rather_than_sold_out() {
    let redis = on_sale(0, 1).await;
    let cache = redis.cache();
    assert_eq!(
        cache.pre_deduct(&token(), UserId(1), 1).await.unwrap(),
        PreDeductOutcome::SoldOut { stock_left: 0 },
        "a loaded product with no stock is sold out"
    );

    let mut conn = redis.connection().await;
    let () = conn.del(cache.keys(PRODUCT).meta).await.unwrap();

    assert_eq!(
        cache.pre_deduct(&token(), UserId(1), 1).await.unwrap(),
        PreDeductOutcome::NotLoaded
    );
}

#[tokio::test]
async fn a_product_that_lost_its_stock_key_answers_not_loaded_rather_than_sold_out() {
    let redis = on_sale(5, 1).await;
    let cache = redis.cache();
    let mut conn = redis.connection().await;
    let () = conn.del(cache.keys(PRODUCT).stock).await.unwrap();
    let before = snapshot(&redis, PRODUCT).await;

    assert_eq!(
        cache.pre_deduct(&token(), UserId(1), 1).await.unwrap(),
        PreDeductOutcome::NotLoaded
    );
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
}

#[tokio::test]
async fn a_reservation_takes_stock_and_writes_a_flow_record_the_domain_reads() {
    let redis = on_sale(10, 5).await;
    let cache = redis.cache();
    let token = token();
    let before_ms = now_ms();

    let outcome = cache.pre_deduct(&token, UserId(u64::MAX), 2).await.unwrap();

    let after_ms = now_ms();
    assert_eq!(outcome, PreDeductOutcome::Reserved { stock_after: 8 });
    assert_eq!(cache.stock(PRODUCT).await.unwrap(), Some(8));
    assert_eq!(cache.flow_count(PRODUCT).await.unwrap(), 1);

    let keys = cache.keys(PRODUCT);
    let mut conn = redis.connection().await;
    let json: String = conn.hget(&keys.flow, token.to_string()).await.unwrap();
    // Written by hand in Lua: the largest user id must not go through a float.
    assert!(
        json.contains(r#""user_id":18446744073709551615,"#),
        "{json}"
    );
    let flow = FlowRecord::from_json(&json).unwrap();
    assert_eq!(flow.user_id, UserId(u64::MAX));
    assert_eq!(flow.quantity, 2);
    assert_eq!((flow.stock_before, flow.stock_after), (10, 8));
    assert_eq!(flow.state, FlowState::Reserved);
    // Redis' clock and ours are the same machine's; allow a little slack either way.
    assert!(
        (before_ms - 1_000..=after_ms + 1_000).contains(&flow.reserved_at_ms),
        "reserved at {} outside [{before_ms}, {after_ms}]",
        flow.reserved_at_ms
    );

    let held: String = conn.hget(&keys.users, u64::MAX.to_string()).await.unwrap();
    assert_eq!(held, "2");
    let view = cache.order_view(&token).await.unwrap();
    assert_eq!(view.flow, Some(flow));
    assert!(!view.confirmed);
    assert_eq!(view.tombstone, None);
}

#[tokio::test]
async fn a_used_token_is_refused_as_duplicate_and_writes_nothing() {
    let redis = on_sale(10, 5).await;
    let cache = redis.cache();
    let token = reserve(cache, 1, 1).await;
    let before = snapshot(&redis, PRODUCT).await;

    for user in [1, 2] {
        assert_eq!(
            cache.pre_deduct(&token, UserId(user), 1).await.unwrap(),
            PreDeductOutcome::Duplicate
        );
    }
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
}

#[tokio::test]
async fn a_token_tombstoned_by_a_release_can_never_reserve() {
    let redis = on_sale(10, 5).await;
    let cache = redis.cache();
    let token = reserve(cache, 1, 1).await;
    cache.release(&token, "send_failed").await.unwrap();
    let before = snapshot(&redis, PRODUCT).await;

    assert_eq!(
        cache.pre_deduct(&token, UserId(1), 1).await.unwrap(),
        PreDeductOutcome::Duplicate
    );
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
}

#[tokio::test]
async fn a_token_rolled_back_by_a_confirm_that_found_no_flow_can_never_reserve() {
    let redis = on_sale(10, 5).await;
    let cache = redis.cache();
    let token = token();

    assert!(!cache.confirm(&token).await.unwrap(), "nothing to commit");
    let before = snapshot(&redis, PRODUCT).await;
    assert_eq!(
        cache.pre_deduct(&token, UserId(1), 1).await.unwrap(),
        PreDeductOutcome::Duplicate
    );
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
    assert_eq!(before.stock.as_deref(), Some("10"));
}

#[tokio::test]
async fn a_token_released_before_it_ever_reserved_can_never_reserve() {
    let redis = on_sale(10, 5).await;
    let cache = redis.cache();
    let token = token();

    cache.release(&token, "send_failed").await.unwrap();

    assert_eq!(
        cache.pre_deduct(&token, UserId(1), 1).await.unwrap(),
        PreDeductOutcome::Duplicate
    );
    assert_eq!(cache.stock(PRODUCT).await.unwrap(), Some(10));
}

#[tokio::test]
async fn the_per_user_limit_holds_across_tokens() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let first = reserve(cache, 1, 1).await;
    reserve(cache, 1, 1).await;
    let before = snapshot(&redis, PRODUCT).await;

    for quantity in [1, 2] {
        assert_eq!(
            cache
                .pre_deduct(&token(), UserId(1), quantity)
                .await
                .unwrap(),
            PreDeductOutcome::LimitExceeded
        );
    }
    assert_eq!(snapshot(&redis, PRODUCT).await, before);

    // Another buyer is not held back, and a released unit counts no more.
    reserve(cache, 2, 2).await;
    cache.release(&first, "send_failed").await.unwrap();
    reserve(cache, 1, 1).await;
    assert_eq!(
        cache.pre_deduct(&token(), UserId(1), 1).await.unwrap(),
        PreDeductOutcome::LimitExceeded
    );
}

#[tokio::test]
async fn a_quantity_above_the_limit_is_refused_and_writes_nothing() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let token = token();
    let before = snapshot(&redis, PRODUCT).await;

    assert_eq!(
        cache.pre_deduct(&token, UserId(1), 3).await.unwrap(),
        PreDeductOutcome::QuantityAboveLimit
    );
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
    // Not even the token was spent.
    assert_eq!(
        cache.pre_deduct(&token, UserId(1), 2).await.unwrap(),
        PreDeductOutcome::Reserved { stock_after: 8 }
    );
}

#[tokio::test]
async fn a_quantity_larger_than_the_stock_left_is_sold_out_with_what_is_left() {
    let redis = on_sale(2, 5).await;
    let cache = redis.cache();
    let before = snapshot(&redis, PRODUCT).await;

    assert_eq!(
        cache.pre_deduct(&token(), UserId(1), 3).await.unwrap(),
        PreDeductOutcome::SoldOut { stock_left: 2 }
    );
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
}

fn window(starts_at_ms: i64, ends_at_ms: i64) -> LoadSpec {
    LoadSpec {
        starts_at_ms,
        ends_at_ms,
        ..open_sale(10, 1)
    }
}

async fn answer_in_window(spec: &LoadSpec) -> (PreDeductOutcome, bool) {
    let redis = TestRedis::new();
    let cache = redis.cache();
    cache.load_product(PRODUCT, spec).await.unwrap();
    let before = snapshot(&redis, PRODUCT).await;
    let outcome = cache.pre_deduct(&token(), UserId(1), 1).await.unwrap();
    (outcome, snapshot(&redis, PRODUCT).await == before)
}

#[tokio::test]
async fn before_the_sale_starts_the_answer_is_sale_not_open() {
    let hour = 3_600_000;
    let (outcome, unchanged) = answer_in_window(&window(now_ms() + hour, 0)).await;
    assert_eq!(outcome, PreDeductOutcome::SaleNotOpen);
    assert!(unchanged);
}

#[tokio::test]
async fn after_the_sale_ends_the_answer_is_sale_not_open() {
    let hour = 3_600_000;
    let (outcome, unchanged) = answer_in_window(&window(now_ms() - hour, now_ms() - 1_000)).await;
    assert_eq!(outcome, PreDeductOutcome::SaleNotOpen);
    assert!(unchanged);
}

#[tokio::test]
async fn inside_the_sale_window_a_buyer_reserves() {
    let hour = 3_600_000;
    let (outcome, _) = answer_in_window(&window(now_ms() - hour, now_ms() + hour)).await;
    assert_eq!(outcome, PreDeductOutcome::Reserved { stock_after: 9 });
}

#[tokio::test]
async fn products_do_not_share_stock_or_buyers() {
    let redis = on_sale(1, 1).await;
    let cache = redis.cache();
    let other = ProductId(8);
    cache.load_product(other, &open_sale(1, 1)).await.unwrap();

    reserve(cache, 1, 1).await;
    let other_token = domain::OrderToken::random(other);

    assert_eq!(
        cache.pre_deduct(&other_token, UserId(1), 1).await.unwrap(),
        PreDeductOutcome::Reserved { stock_after: 0 }
    );
    assert_eq!(cache.stock(PRODUCT).await.unwrap(), Some(0));
    assert_eq!(cache.stock(other).await.unwrap(), Some(0));
}

#[tokio::test]
async fn a_token_of_an_earlier_sale_is_not_served_by_the_next_sale_and_writes_nothing() {
    let redis = on_sale(10, 1).await;
    let cache = redis.cache();
    let first = cache.sale_window(PRODUCT).await.unwrap().unwrap().sale;
    assert!(first > 0, "a fresh load starts a sale generation");

    // The product put up for sale afresh: a new sale of it.
    cache
        .load_product(PRODUCT, &open_sale(10, 1))
        .await
        .unwrap();
    let second = cache.sale_window(PRODUCT).await.unwrap().unwrap().sale;
    assert!(second > first, "{second} after {first}");

    let before = snapshot(&redis, PRODUCT).await;
    assert_eq!(
        cache
            .pre_deduct_in_sale(&token(), UserId(1), 1, first)
            .await
            .unwrap(),
        PreDeductOutcome::SaleNotOpen
    );
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
    assert_eq!(
        cache
            .pre_deduct_in_sale(&token(), UserId(1), 1, second)
            .await
            .unwrap(),
        PreDeductOutcome::Reserved { stock_after: 9 }
    );
}

#[tokio::test]
async fn a_rebuilt_product_keeps_no_generation_and_refuses_the_tokens_of_any_earlier_sale() {
    let redis = on_sale(10, 1).await;
    let cache = redis.cache();
    let lost = cache.sale_window(PRODUCT).await.unwrap().unwrap().sale;
    redis.delete_all_keys().unwrap();
    let rebuild = stock_cache::LoadSpec {
        mode: stock_cache::LoadMode::Rebuild,
        ..open_sale(10, 1)
    };
    cache.load_product(PRODUCT, &rebuild).await.unwrap();

    assert_eq!(cache.sale_window(PRODUCT).await.unwrap().unwrap().sale, 0);
    assert_eq!(
        cache
            .pre_deduct_in_sale(&token(), UserId(1), 1, lost)
            .await
            .unwrap(),
        PreDeductOutcome::SaleNotOpen
    );
    assert_eq!(
        cache
            .pre_deduct_in_sale(&token(), UserId(1), 1, 0)
            .await
            .unwrap(),
        PreDeductOutcome::Reserved { stock_after: 9 }
    );
}
