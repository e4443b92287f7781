//! The two ways out of "reserved": `confirm.lua` (commit) and `release.lua` (give back).

use domain::{FlowState, UserId};
use redis::AsyncCommands;
use stock_cache::{ReleaseOutcome, Tombstone};

use crate::helpers::{PRODUCT, lose_meta_and_stock, on_sale, reserve, snapshot, token};

#[tokio::test]
async fn confirm_commits_a_reserved_flow_and_says_so_again_when_repeated() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let token = reserve(cache, 1, 2).await;
    let reserved = cache.order_view(&token).await.unwrap().flow.unwrap();

    assert!(cache.confirm(&token).await.unwrap());

    let committed = cache.order_view(&token).await.unwrap().flow.unwrap();
    assert_eq!(committed.state, FlowState::Committed);
    assert_eq!(
        (committed.user_id, committed.quantity, committed.stock_after),
        (reserved.user_id, reserved.quantity, reserved.stock_after)
    );
    let before = snapshot(&redis, PRODUCT).await;
    assert!(cache.confirm(&token).await.unwrap(), "a check-back repeats");
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
    assert!(before.tomb.is_empty());
    assert_eq!(before.stock.as_deref(), Some("8"));
}

#[tokio::test]
async fn release_of_a_committed_flow_is_refused_and_changes_nothing() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let token = reserve(cache, 1, 1).await;
    assert!(cache.confirm(&token).await.unwrap());
    let before = snapshot(&redis, PRODUCT).await;

    for _ in 0..2 {
        assert_eq!(
            cache.release(&token, "send_failed").await.unwrap(),
            ReleaseOutcome::AlreadyCommitted
        );
    }
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
}

#[tokio::test]
async fn release_gives_the_unit_back_and_tombstones_the_token() {
    let redis = on_sale(10, 3).await;
    let cache = redis.cache();
    let user = u64::MAX;
    let released = reserve(cache, user, 2).await;
    let kept = reserve(cache, user, 1).await;
    let epoch = cache.meta(PRODUCT).await.unwrap().unwrap().epoch;

    assert_eq!(
        cache.release(&released, "send_failed").await.unwrap(),
        ReleaseOutcome::Released
    );

    assert_eq!(cache.stock(PRODUCT).await.unwrap(), Some(9));
    let after = snapshot(&redis, PRODUCT).await;
    assert!(!after.flow.contains_key(&released.to_string()));
    assert!(after.flow.contains_key(&kept.to_string()));
    assert_eq!(
        after.users.get(&user.to_string()).map(String::as_str),
        Some("1")
    );
    assert_eq!(
        cache.meta(PRODUCT).await.unwrap().unwrap().epoch,
        epoch + 1,
        "the epoch moves so that gateways drop their sold-out flag"
    );
    let tomb = Tombstone {
        user_id: Some(UserId(user)),
        quantity: Some(2),
        reason: "send_failed".into(),
    };
    let view = cache.order_view(&released).await.unwrap();
    assert_eq!((view.flow, view.tombstone), (None, Some(tomb.clone())));

    // The last unit of a buyer takes the buyer out of the users hash.
    cache.release(&kept, "send_failed").await.unwrap();
    assert!(snapshot(&redis, PRODUCT).await.users.is_empty());
    assert_eq!(cache.stock(PRODUCT).await.unwrap(), Some(10));
    assert_eq!(
        cache.order_view(&released).await.unwrap().tombstone,
        Some(tomb)
    );
}

#[tokio::test]
async fn a_confirm_after_a_release_rolls_back_and_keeps_the_release_tombstone() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let token = reserve(cache, 1, 1).await;
    cache.release(&token, "reconcile_restore").await.unwrap();
    let before = snapshot(&redis, PRODUCT).await;

    assert!(!cache.confirm(&token).await.unwrap());

    assert_eq!(snapshot(&redis, PRODUCT).await, before);
    let tomb = cache.order_view(&token).await.unwrap().tombstone.unwrap();
    assert_eq!(tomb.reason, "reconcile_restore");
}

#[tokio::test]
async fn a_second_release_gives_nothing_back() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let token = reserve(cache, 1, 1).await;
    cache.release(&token, "send_failed").await.unwrap();
    let before = snapshot(&redis, PRODUCT).await;

    assert_eq!(
        cache.release(&token, "send_failed").await.unwrap(),
        ReleaseOutcome::NothingReserved
    );
    assert_eq!(snapshot(&redis, PRODUCT).await, before);
}

#[tokio::test]
async fn releasing_a_token_that_never_reserved_only_tombstones_it() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let token = token();
    let before = snapshot(&redis, PRODUCT).await;

    assert_eq!(
        cache.release(&token, "send_failed").await.unwrap(),
        ReleaseOutcome::NothingReserved
    );

    let after = snapshot(&redis, PRODUCT).await;
    assert_eq!(
        (&after.stock, &after.meta, &after.flow, &after.users),
        (&before.stock, &before.meta, &before.flow, &before.users)
    );
    assert_eq!(after.tomb.len(), 1);
    let tomb = cache.order_view(&token).await.unwrap().tombstone.unwrap();
    assert_eq!((tomb.user_id, tomb.reason.as_str()), (None, "send_failed"));
    // A late confirm of that token rolls back.
    assert!(!cache.confirm(&token).await.unwrap());
}

#[tokio::test]
async fn a_committed_token_still_counts_against_the_buyer_and_cannot_reserve_again() {
    let redis = on_sale(10, 1).await;
    let cache = redis.cache();
    let token = reserve(cache, 1, 1).await;
    assert!(cache.confirm(&token).await.unwrap());

    assert_eq!(
        cache.pre_deduct(&token, UserId(2), 1).await.unwrap(),
        domain::PreDeductOutcome::Duplicate
    );
    assert_eq!(
        cache
            .pre_deduct(&crate::helpers::token(), UserId(1), 1)
            .await
            .unwrap(),
        domain::PreDeductOutcome::LimitExceeded
    );
    let mut conn = redis.connection().await;
    let held: i64 = conn.hget(cache.keys(PRODUCT).users, "1").await.unwrap();
    assert_eq!(held, 1);
}

#[tokio::test]
async fn a_check_back_after_redis_lost_the_product_gets_no_answer_and_writes_nothing() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let token = reserve(cache, 1, 1).await;
    redis.delete_all_keys().unwrap();

    let answer = cache.confirm(&token).await;

    assert!(
        matches!(answer, Err(stock_cache::CacheError::NotLoaded)),
        "{answer:?}"
    );
    assert_eq!(snapshot(&redis, PRODUCT).await, Default::default());
}

#[tokio::test]
async fn an_order_marked_confirmed_commits_its_flow_should_redis_have_lost_the_commit() {
    let redis = on_sale(10, 1).await;
    let cache = redis.cache();
    // confirm.lua's commit lost (a failover): the flow is reserved, its order written.
    let token = reserve(cache, 1, 1).await;

    cache
        .mark_confirmed_until(&[(token.clone(), 1_000)])
        .await
        .unwrap();

    let flow = cache.order_view(&token).await.unwrap().flow.unwrap();
    assert_eq!(flow.state, FlowState::Committed);
    assert_eq!(
        cache.release(&token, "reconcile_restore").await.unwrap(),
        ReleaseOutcome::AlreadyCommitted,
        "the unit of a written order is never given back"
    );
}

#[tokio::test]
async fn a_rebuild_forgets_flows_buyers_and_results_but_keeps_tombstones() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let kept = reserve(cache, 1, 1).await;
    cache
        .mark_confirmed(std::slice::from_ref(&kept))
        .await
        .unwrap();
    let released = reserve(cache, 2, 1).await;
    cache.release(&released, "send_failed").await.unwrap();

    // A rebuild follows a Redis that lost the product: with meta there, it is on sale and
    // its flows are live, and forgetting them is refused.
    lose_meta_and_stock(&redis).await;
    cache.forget_sale_state(PRODUCT).await.unwrap();
    let restored = stock_cache::RestoredOrder {
        order_token: kept.to_string(),
        user_id: UserId(1),
        quantity: 1,
        reserved_at_ms: 1_700_000_000_000,
    };
    cache.restore_orders(PRODUCT, &[restored]).await.unwrap();

    let after = snapshot(&redis, PRODUCT).await;
    assert_eq!(after.flow.len(), 1);
    let flow = cache.order_view(&kept).await.unwrap().flow.unwrap();
    assert_eq!((flow.user_id, flow.quantity), (UserId(1), 1));
    assert_eq!(flow.state, FlowState::Committed);
    assert_eq!(after.users, [("1".to_owned(), "1".to_owned())].into());
    assert_eq!(after.result[&kept.to_string()], "confirmed");
    assert!(after.tomb.contains_key(&released.to_string()));
}

#[tokio::test]
async fn confirming_the_orders_of_one_message_commits_them_all() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let tokens = vec![
        reserve(cache, 1, 1).await,
        reserve(cache, 2, 2).await,
        reserve(cache, 3, 1).await,
    ];

    assert!(cache.confirm_all(&tokens).await.unwrap());

    for token in &tokens {
        let flow = cache.order_view(token).await.unwrap().flow.unwrap();
        assert_eq!(flow.state, FlowState::Committed);
    }
    let after = snapshot(&redis, PRODUCT).await;
    assert_eq!(after.stock.as_deref(), Some("6"));
    assert!(after.tomb.is_empty());
}

#[tokio::test]
async fn a_message_with_one_released_order_rolls_back_and_gives_back_the_reserved_rest() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let released = reserve(cache, 1, 1).await;
    let reserved = reserve(cache, 2, 2).await;
    let committed_alone = reserve(cache, 3, 1).await;
    assert_eq!(
        cache.release(&released, "restore").await.unwrap(),
        ReleaseOutcome::Released
    );
    assert!(cache.confirm(&committed_alone).await.unwrap());
    let epoch = cache.meta(PRODUCT).await.unwrap().unwrap().epoch;

    let message = [released.clone(), reserved.clone(), committed_alone.clone()];
    assert!(!cache.confirm_all(&message).await.unwrap());

    let after = snapshot(&redis, PRODUCT).await;
    // 10 − 1 − 2 − 1, then the released unit and the two reserved ones back: only the
    // order committed on its own stays sold (reconcile re-publishes it).
    assert_eq!(after.stock.as_deref(), Some("9"));
    assert_eq!(
        after.users.get("2"),
        None,
        "the buyer's units are given back"
    );
    let tomb: Tombstone = serde_json::from_str(&after.tomb[&reserved.to_string()]).unwrap();
    assert_eq!(
        (tomb.user_id, tomb.quantity, tomb.reason.as_str()),
        (Some(UserId(2)), Some(2), "rolled_back")
    );
    let kept: Tombstone = serde_json::from_str(&after.tomb[&released.to_string()]).unwrap();
    assert_eq!(
        kept.reason, "restore",
        "the earlier release's tombstone is kept"
    );
    let flow = cache
        .order_view(&committed_alone)
        .await
        .unwrap()
        .flow
        .unwrap();
    assert_eq!(flow.state, FlowState::Committed);
    assert!(cache.meta(PRODUCT).await.unwrap().unwrap().epoch > epoch);

    assert!(
        !cache.confirm_all(&message).await.unwrap(),
        "a check-back repeats the answer"
    );
    assert_eq!(snapshot(&redis, PRODUCT).await, after);
}
