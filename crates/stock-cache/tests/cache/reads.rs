//! The read side: status polling, the reconcile audit's HSCAN walk, and batch lookups.

use std::collections::HashSet;

use domain::{FlowState, OrderToken, ProductId};
use redis::AsyncCommands;
use stock_cache::OrderView;
use test_support::redis::TestRedis;

use crate::helpers::{PRODUCT, on_sale, open_sale, reserve, token, walk_flows};

#[tokio::test]
async fn mark_confirmed_makes_order_view_report_the_order_confirmed() {
    let redis = on_sale(10, 1).await;
    let cache = redis.cache();
    let other = ProductId(8);
    cache.load_product(other, &open_sale(10, 1)).await.unwrap();
    let here = reserve(cache, 1, 1).await;
    let there = OrderToken::random(other);
    cache
        .pre_deduct(&there, domain::UserId(1), 1)
        .await
        .unwrap();
    for token in [&here, &there] {
        assert!(cache.confirm(token).await.unwrap());
        assert!(!cache.order_view(token).await.unwrap().confirmed);
    }

    // One batch may hold orders of several products.
    cache
        .mark_confirmed(&[here.clone(), there.clone()])
        .await
        .unwrap();

    for token in [&here, &there] {
        let view = cache.order_view(token).await.unwrap();
        assert!(view.confirmed);
        assert_eq!(view.flow.unwrap().state, FlowState::Committed);
        assert_eq!(view.tombstone, None);
    }
    cache.mark_confirmed(&[]).await.unwrap();
}

#[tokio::test]
async fn order_view_of_an_unknown_token_is_empty() {
    let redis = on_sale(10, 1).await;

    let view = redis.cache().order_view(&token()).await.unwrap();

    assert_eq!(view, OrderView::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scan_flows_walks_every_flow_over_several_pages() {
    const FLOWS: u64 = 2_500;
    const WORKERS: u64 = 10;
    let redis = on_sale(i64::try_from(FLOWS).unwrap(), 1).await;
    let cache = redis.cache();
    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let cache = cache.clone();
            tokio::spawn(async move {
                let mut tokens = Vec::new();
                for user in (0..FLOWS).filter(|user| user % WORKERS == worker) {
                    tokens.push(reserve(&cache, user, 1).await);
                }
                tokens
            })
        })
        .collect();
    let mut reserved = HashSet::new();
    for worker in workers {
        reserved.extend(worker.await.unwrap());
    }
    assert_eq!(cache.flow_count(PRODUCT).await.unwrap(), FLOWS);

    let walk = walk_flows(cache, PRODUCT, 500).await;

    assert!(walk.pages >= 3, "{} pages", walk.pages);
    assert!(walk.unreadable.is_empty(), "{:?}", walk.unreadable);
    let seen: HashSet<_> = walk.flows.iter().map(|(token, _)| token.clone()).collect();
    assert_eq!(seen, reserved, "HSCAN returns every flow at least once");
    assert!(walk.flows.iter().all(|(_, flow)| flow.quantity == 1));
}

#[tokio::test]
async fn scan_flows_sets_aside_unreadable_records_and_returns_the_rest() {
    let redis = on_sale(10, 1).await;
    let cache = redis.cache();
    let good: HashSet<_> = [reserve(cache, 1, 1).await, reserve(cache, 2, 1).await].into();
    let damaged = token();
    let mut conn = redis.connection().await;
    let flow_key = cache.keys(PRODUCT).flow;
    let () = conn
        .hset(&flow_key, damaged.to_string(), "{not json")
        .await
        .unwrap();
    let () = conn
        .hset(&flow_key, "not-a-token", r#"{"user_id":1}"#)
        .await
        .unwrap();

    let walk = walk_flows(cache, PRODUCT, 10).await;

    let seen: HashSet<_> = walk.flows.into_iter().map(|(token, _)| token).collect();
    assert_eq!(seen, good);
    let unreadable: HashSet<_> = walk.unreadable.into_iter().collect();
    assert_eq!(
        unreadable,
        [damaged.to_string(), "not-a-token".to_owned()].into()
    );
}

#[tokio::test]
async fn flows_exist_answers_for_each_token_in_order() {
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let reserved = reserve(cache, 1, 1).await;
    let committed = reserve(cache, 1, 1).await;
    assert!(cache.confirm(&committed).await.unwrap());
    let released = reserve(cache, 2, 1).await;
    cache.release(&released, "send_failed").await.unwrap();
    let never = token();

    let tokens: Vec<String> = [&reserved, &released, &never, &committed]
        .iter()
        .map(|token| token.to_string())
        .collect();
    let exist = cache.flows_exist(PRODUCT, &tokens).await.unwrap();

    assert_eq!(exist, vec![true, false, false, true]);
    assert_eq!(
        cache.flows_exist(PRODUCT, &[]).await.unwrap(),
        Vec::<bool>::new()
    );
    assert_eq!(cache.flow_count(PRODUCT).await.unwrap(), 2);
}

#[tokio::test]
async fn ping_answers_when_redis_is_up() {
    TestRedis::new().cache().ping().await.unwrap();
}
