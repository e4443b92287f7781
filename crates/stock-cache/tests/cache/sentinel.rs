//! `redis.mode = "sentinel"`: the cache on the primary that three sentinels name, through a
//! `SENTINEL FAILOVER` in the middle of a sale. The group is the test's own: a primary, a
//! replica and three sentinels on free loopback ports.
//!
//! With `wait_replicas = 1` a reservation is acknowledged only once the replica has it, so
//! the replica promoted by the failover holds every acknowledged one; a reservation the old
//! primary took after the promotion is never acknowledged (its `WAIT` finds no replica) and
//! is given back, as the gateway does. Whatever was kept, the new primary's stock and flows
//! add up to the units on sale.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use domain::{OrderToken, PreDeductOutcome, UserId};
use stock_cache::{ReplicaWait, StockCache};
use test_support::redis::TestRedis;
use test_support::redis_topology::SentinelGroup;

use crate::helpers::{PRODUCT, open_sale};

const STOCK: i64 = 400;

/// Each buyer's answer, and when it came.
struct Answer {
    token: OrderToken,
    at: Instant,
    reserved: bool,
    /// What a buyer who did not reserve was told.
    refusal: Option<String>,
}

/// Buyers one after another, a few at a time, until `stop` says so or the stock is gone;
/// `reserved` counts the acknowledged reservations as they come.
async fn crowd(
    cache: StockCache,
    stop: tokio::sync::watch::Receiver<bool>,
    reserved: Arc<AtomicUsize>,
) -> Vec<Answer> {
    let mut answers = Vec::new();
    let mut user = 0;
    while !*stop.borrow() && user < 2 * STOCK as u64 {
        let wave: Vec<_> = (0..4)
            .map(|_| {
                user += 1;
                let (cache, token) = (cache.clone(), OrderToken::random(PRODUCT));
                let reserved = Arc::clone(&reserved);
                tokio::spawn(async move {
                    let outcome = cache.pre_deduct(&token, UserId(user), 1).await;
                    if matches!(&outcome, Err(e) if e.reserved_unreplicated()) {
                        // What the gateway does with a unit it cannot promise: give it back.
                        // Should that fail, the flow stays for reconcile; the count below
                        // holds either way.
                        let _ = cache.release(&token, "not_replicated").await;
                    }
                    if matches!(outcome, Ok(PreDeductOutcome::Reserved { .. })) {
                        reserved.fetch_add(1, Ordering::Relaxed);
                    }
                    Answer {
                        token,
                        at: Instant::now(),
                        reserved: matches!(outcome, Ok(PreDeductOutcome::Reserved { .. })),
                        refusal: match outcome {
                            Ok(PreDeductOutcome::Reserved { .. }) => None,
                            Ok(other) => Some(format!("{other:?}")),
                            Err(error) => Some(error.to_string()),
                        },
                    }
                })
            })
            .collect();
        for answer in wave {
            answers.push(answer.await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    answers
}

#[tokio::test(flavor = "multi_thread")]
async fn through_a_failover_mid_sale_the_cache_follows_the_new_primary_and_keeps_every_acknowledged_reservation()
 {
    let group = SentinelGroup::start().await;
    let old_primary = group.primary_url().await;
    let redis = TestRedis::on_sentinel(&group.sentinel_urls(), group.master_name(), &old_primary);
    let cache = redis
        .cache()
        .clone()
        .waiting_for_replicas(ReplicaWait::new(1, Duration::from_millis(500)));
    cache
        .load_product(PRODUCT, &open_sale(STOCK, 1))
        .await
        .unwrap();

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let reserved = Arc::new(AtomicUsize::new(0));
    let sale = tokio::spawn(crowd(cache.clone(), stopped, Arc::clone(&reserved)));
    let reserved_now = || reserved.load(Ordering::Relaxed);
    test_support::eventually(Duration::from_secs(20), "the sale under way", || async {
        (reserved_now() >= 40).then_some(())
    })
    .await;
    let new_primary = group.failover().await;
    let failed_over = Instant::now();
    assert_ne!(new_primary, old_primary);
    let reserved_at_failover = reserved_now();
    test_support::eventually(
        Duration::from_secs(30),
        "reservations after the failover",
        || async { (reserved_now() >= reserved_at_failover + 40).then_some(()) },
    )
    .await;
    stop.send(true).unwrap();
    let answers = sale.await.unwrap();

    let first_after = answers
        .iter()
        .filter(|answer| answer.reserved && answer.at > failed_over)
        .map(|answer| answer.at - failed_over)
        .min()
        .unwrap_or_else(|| {
            let after: std::collections::BTreeMap<_, usize> = answers
                .iter()
                .filter(|answer| answer.at > failed_over)
                .filter_map(|answer| answer.refusal.clone())
                .fold(Default::default(), |mut counts, refusal| {
                    *counts.entry(refusal).or_default() += 1;
                    counts
                });
            panic!("no reservation acknowledged after the failover; refusals: {after:?}")
        });
    assert!(
        first_after < Duration::from_secs(10),
        "the cache followed the new primary {first_after:?} after the failover"
    );

    // Read on the new primary itself, not through the sentinels.
    let on_new = StockCache::new(&new_primary, 1, redis.prefix(), Duration::from_secs(5)).unwrap();
    for answer in answers.iter().filter(|answer| answer.reserved) {
        let view = on_new.order_view(&answer.token).await.unwrap();
        assert!(
            view.flow.is_some(),
            "an acknowledged reservation ({}) is on the new primary",
            answer.token
        );
    }
    let stock = on_new.stock(PRODUCT).await.unwrap().unwrap();
    let flows = on_new.flow_count(PRODUCT).await.unwrap() as i64;
    let held: i64 = on_new.units_by_buyer(PRODUCT).await.unwrap().values().sum();
    assert_eq!(stock + flows, STOCK, "no unit lost or sold twice");
    assert_eq!(held, flows, "the buyers hold what the flows say");
}
