//! Many callers at once: the scripts are atomic, so no interleaving oversells or lets a
//! unit be both committed and given back.

use std::collections::HashMap;

use domain::{FlowState, PreDeductOutcome, UserId};
use stock_cache::ReleaseOutcome;

use crate::helpers::{
    PRODUCT, assert_flows_tile_the_stock, assert_stock_is_conserved, on_sale, reserve, snapshot,
    token, walk_flows,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_buyers_racing_for_fifty_units_get_exactly_fifty() {
    const INITIAL: i64 = 50;
    let redis = on_sale(INITIAL, 1).await;
    let cache = redis.cache();

    let tasks: Vec<_> = (1..=200)
        .map(|user| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.pre_deduct(&token(), UserId(user), 1).await })
        })
        .collect();
    let mut stock_after = Vec::new();
    let mut sold_out = 0;
    for task in tasks {
        match task.await.unwrap().unwrap() {
            PreDeductOutcome::Reserved { stock_after: left } => stock_after.push(left),
            PreDeductOutcome::SoldOut { stock_left: 0 } => sold_out += 1,
            other => panic!("{other:?}"),
        }
    }

    assert_eq!((stock_after.len(), sold_out), (50, 150));
    stock_after.sort_unstable();
    assert_eq!(
        stock_after,
        (0..INITIAL).collect::<Vec<_>>(),
        "each saw its own stock"
    );
    assert_eq!(cache.stock(PRODUCT).await.unwrap(), Some(0));
    assert_eq!(cache.flow_count(PRODUCT).await.unwrap(), 50);
    assert_eq!(snapshot(&redis, PRODUCT).await.users.len(), 50);
    assert_stock_is_conserved(cache, PRODUCT, INITIAL).await;
    let flows: Vec<_> = walk_flows(cache, PRODUCT, 100)
        .await
        .flows
        .into_iter()
        .collect::<HashMap<_, _>>()
        .into_values()
        .collect();
    assert_flows_tile_the_stock(&flows, 0, INITIAL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buyers_asking_for_different_quantities_never_take_stock_below_zero() {
    const INITIAL: i64 = 100;
    let redis = on_sale(INITIAL, 3).await;
    let cache = redis.cache();

    let tasks: Vec<_> = (0..200_u64)
        .map(|user| {
            let cache = cache.clone();
            let quantity = 1 + u32::try_from(user % 3).unwrap();
            let task = async move { cache.pre_deduct(&token(), UserId(user), quantity).await };
            (quantity, tokio::spawn(task))
        })
        .collect();
    let mut reserved = 0;
    for (quantity, task) in tasks {
        match task.await.unwrap().unwrap() {
            PreDeductOutcome::Reserved { stock_after } => {
                assert!(stock_after >= 0);
                reserved += i64::from(quantity);
            }
            PreDeductOutcome::SoldOut { stock_left } => {
                assert!(
                    (0..i64::from(quantity)).contains(&stock_left),
                    "{stock_left}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    let stock = cache.stock(PRODUCT).await.unwrap().unwrap();
    // Demand (400 units) is above supply, so someone was refused: fewer than 3 are left.
    assert!((0..3).contains(&stock), "{stock} left");
    assert_eq!(stock + reserved, INITIAL);
    assert_stock_is_conserved(cache, PRODUCT, INITIAL).await;
    let flows: Vec<_> = walk_flows(cache, PRODUCT, 100)
        .await
        .flows
        .into_iter()
        .collect::<HashMap<_, _>>()
        .into_values()
        .collect();
    assert_flows_tile_the_stock(&flows, stock, INITIAL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirm_racing_release_either_commits_or_gives_back_never_both() {
    const ROUNDS: u64 = 200;
    let initial = i64::try_from(ROUNDS).unwrap();
    let redis = on_sale(initial, 1).await;
    let cache = redis.cache();
    let (mut committed, mut released) = (0_u64, 0_u64);

    for round in 0..ROUNDS {
        let token = reserve(cache, round + 1, 1).await;
        // Both orders of polling, so each side gets to be sent first.
        let (confirm, release) = if round % 2 == 0 {
            tokio::join!(cache.confirm(&token), cache.release(&token, "send_failed"))
        } else {
            let (release, confirm) =
                tokio::join!(cache.release(&token, "send_failed"), cache.confirm(&token));
            (confirm, release)
        };
        let view = cache.order_view(&token).await.unwrap();
        match (confirm.unwrap(), release.unwrap()) {
            (true, ReleaseOutcome::AlreadyCommitted) => {
                committed += 1;
                assert_eq!(view.flow.unwrap().state, FlowState::Committed);
                assert_eq!(view.tombstone, None, "round {round}");
            }
            (false, ReleaseOutcome::Released) => {
                released += 1;
                assert_eq!(view.flow, None, "round {round}");
                assert_eq!(view.tombstone.unwrap().quantity, Some(1));
            }
            both_or_neither => panic!("round {round}: {both_or_neither:?}"),
        }
    }

    assert_eq!(committed + released, ROUNDS);
    // Each order of the race must have happened, or the test has only shown one of them.
    assert!(
        committed >= 1 && released >= 1,
        "both interleavings must occur: confirm won {committed} times, release {released} times"
    );
    let stock = cache.stock(PRODUCT).await.unwrap().unwrap();
    assert_eq!(stock, i64::try_from(released).unwrap());
    assert_eq!(cache.flow_count(PRODUCT).await.unwrap(), committed);
    assert_eq!(
        snapshot(&redis, PRODUCT).await.tomb.len(),
        usize::try_from(released).unwrap()
    );
    assert_stock_is_conserved(cache, PRODUCT, initial).await;
}
