//! The order events: each status change is published by the script that makes it, and a
//! subscriber hears it, reconnecting when its connection is lost.

use std::time::Duration;

use domain::{Closing, OrderStatus, OrderToken};
use futures::{Stream, StreamExt};
use stock_cache::OrderEvent;
use test_support::redis::TestRedis;

use crate::helpers::{now_ms, on_sale, reserve};

/// `CLIENT KILL TYPE pubsub` drops every subscriber on the server, those of the other tests
/// here too: they take turns, so that none loses an event it waits for to another's kill.
static SUBSCRIBERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Events arrive within this, or the test fails.
const WITHIN: Duration = Duration::from_secs(1);

async fn next_event(events: &mut (impl Stream<Item = OrderEvent> + Unpin)) -> OrderEvent {
    tokio::time::timeout(WITHIN, events.next())
        .await
        .expect("an event within a second")
        .expect("the events never end")
}

fn changed(token: &OrderToken, status: OrderStatus) -> OrderEvent {
    OrderEvent::Changed {
        token: token.clone(),
        status,
    }
}

async fn publish(redis: &TestRedis, payload: &str) {
    let mut conn = redis.connection().await;
    let _: i64 = redis::cmd("PUBLISH")
        .arg(redis.cache().events_channel())
        .arg(payload)
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_subscriber_hears_an_order_confirmed_paid_and_another_cancelled() {
    let _turn = SUBSCRIBERS.lock().await;
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let mut events = Box::pin(cache.event_source().subscribe());
    assert_eq!(next_event(&mut events).await, OrderEvent::Resubscribed);
    let (paid, cancelled) = (reserve(cache, 1, 1).await, reserve(cache, 2, 1).await);
    cache
        .confirm_all(&[paid.clone(), cancelled.clone()])
        .await
        .unwrap();

    let deadline = now_ms() + 60_000;
    cache
        .mark_confirmed_until(&[(paid.clone(), deadline), (cancelled.clone(), deadline)])
        .await
        .unwrap();
    cache.mark_paid(&paid).await.unwrap();
    cache
        .return_units(&cancelled, Closing::Cancelled)
        .await
        .unwrap();

    // In the order the changes were made: the confirmations of one product in one script.
    let mut heard = Vec::new();
    for _ in 0..4 {
        heard.push(next_event(&mut events).await);
    }
    assert_eq!(
        heard,
        [
            changed(&paid, OrderStatus::Confirmed),
            changed(&cancelled, OrderStatus::Confirmed),
            changed(&paid, OrderStatus::Paid),
            changed(&cancelled, OrderStatus::Cancelled),
        ]
    );
}

#[tokio::test]
async fn a_change_that_did_not_happen_is_not_published() {
    let _turn = SUBSCRIBERS.lock().await;
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let mut events = Box::pin(cache.event_source().subscribe());
    assert_eq!(next_event(&mut events).await, OrderEvent::Resubscribed);
    let order = reserve(cache, 1, 1).await;
    cache.confirm(&order).await.unwrap();
    cache.mark_paid(&order).await.unwrap();
    assert_eq!(
        next_event(&mut events).await,
        changed(&order, OrderStatus::Paid)
    );

    // Neither a repeated payment nor a redelivered confirmation changes it.
    cache.mark_paid(&order).await.unwrap();
    cache
        .mark_confirmed_until(&[(order.clone(), now_ms())])
        .await
        .unwrap();
    let last = reserve(cache, 2, 1).await;
    cache.confirm(&last).await.unwrap();
    cache.mark_paid(&last).await.unwrap();

    assert_eq!(
        next_event(&mut events).await,
        changed(&last, OrderStatus::Paid)
    );
}

#[tokio::test]
async fn malformed_payloads_are_skipped() {
    let _turn = SUBSCRIBERS.lock().await;
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let mut events = Box::pin(cache.event_source().subscribe());
    assert_eq!(next_event(&mut events).await, OrderEvent::Resubscribed);
    let order = reserve(cache, 1, 1).await;

    for junk in ["", "hello", "7-xyz paid", &format!("{order} shipped")] {
        publish(&redis, junk).await;
    }
    publish(&redis, &format!("{order} expired")).await;

    assert_eq!(
        next_event(&mut events).await,
        changed(&order, OrderStatus::Expired)
    );
}

#[tokio::test]
async fn a_subscriber_whose_connection_is_killed_resubscribes_and_keeps_hearing() {
    let _turn = SUBSCRIBERS.lock().await;
    let redis = on_sale(10, 2).await;
    let cache = redis.cache();
    let mut events = Box::pin(cache.event_source().subscribe());
    assert_eq!(next_event(&mut events).await, OrderEvent::Resubscribed);
    let order = reserve(cache, 1, 1).await;
    cache.confirm(&order).await.unwrap();
    cache
        .mark_confirmed(std::slice::from_ref(&order))
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut events).await,
        changed(&order, OrderStatus::Confirmed)
    );

    let mut conn = redis.connection().await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "pubsub"])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(killed >= 1, "the subscriber's connection was there to kill");

    assert_eq!(next_event(&mut events).await, OrderEvent::Resubscribed);
    cache.mark_paid(&order).await.unwrap();
    assert_eq!(
        next_event(&mut events).await,
        changed(&order, OrderStatus::Paid)
    );
}

#[tokio::test]
async fn each_deployment_hears_only_its_own_orders() {
    let _turn = SUBSCRIBERS.lock().await;
    let (mine, theirs) = (on_sale(10, 2).await, on_sale(10, 2).await);
    let mut events = Box::pin(mine.cache().event_source().subscribe());
    assert_eq!(next_event(&mut events).await, OrderEvent::Resubscribed);
    let (their_order, my_order) = (
        reserve(theirs.cache(), 1, 1).await,
        reserve(mine.cache(), 1, 1).await,
    );

    theirs.cache().mark_paid(&their_order).await.unwrap();
    mine.cache().mark_paid(&my_order).await.unwrap();

    assert_ne!(
        mine.cache().events_channel(),
        theirs.cache().events_channel()
    );
    assert_eq!(
        next_event(&mut events).await,
        changed(&my_order, OrderStatus::Paid)
    );
}
