//! The whole consumer, in this process, fed by plain messages on its own topic.

use std::time::Duration;

use domain::ProductId;
use test_support::stack::TestStack;

use crate::helpers::{
    orders, publish, publish_packed, put_product, spawn_consumer, stock_flow_rows, stop, wait_until,
};
use crate::lifecycle::GRACE;

/// Generous for a loaded machine; on an idle one the orders arrive within a few seconds.
const DELIVERY: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_orders_are_all_written_to_mysql_and_confirmed_in_redis() {
    let stack = TestStack::new().await;
    put_product(&stack, 1, 20).await;
    let consumer = spawn_consumer(&stack).await;
    let sent = orders(1, 10);

    publish(stack.settings(&[]), sent.clone()).await;

    let db = stack.db.db();
    let waited = wait_until(DELIVERY, "all 10 orders in MySQL", || async {
        db.order_count(ProductId(1)).await.unwrap() == 10
    })
    .await;
    eprintln!("10 orders written {waited:?} after publishing");
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));
    assert_eq!(stock_flow_rows(&stack, 1).await, 10);
    for order in &sent {
        let confirmed = stack
            .redis
            .cache()
            .order_view(&order.order_token)
            .await
            .unwrap()
            .confirmed;
        assert!(confirmed, "{}", order.order_token);
    }

    let (stopped, took) = stop(consumer).await;
    stopped.expect("the consumer stops cleanly");
    assert!(took < GRACE, "stopping took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_full_messages_is_written_and_confirmed_with_more_orders_of_a_product_per_batch_than_a_deadline_names()
 {
    let stack = TestStack::new().await;
    // Queued before the consumer starts, its batches take several full messages each: far
    // more orders of the product than one deadline message may name.
    let (messages, per_message) = (16, 200);
    put_product(&stack, 1, messages * per_message).await;
    let sent = orders(1, messages as u64 * per_message as u64);
    publish_packed(stack.settings(&[]), sent.clone(), per_message as usize).await;

    let consumer = spawn_consumer(&stack).await;

    let cache = stack.redis.cache();
    wait_until(DELIVERY, "every order written and confirmed", || async {
        for order in &sent {
            if !cache
                .order_view(&order.order_token)
                .await
                .unwrap()
                .confirmed
            {
                return false;
            }
        }
        true
    })
    .await;
    let db = stack.db.db();
    assert_eq!(
        db.order_count(ProductId(1)).await.unwrap(),
        sent.len() as i64
    );
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(0));
    let (stopped, _) = stop(consumer).await;
    stopped.expect("the consumer stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_published_before_the_consumer_first_starts_are_still_written() {
    let stack = TestStack::new().await;
    put_product(&stack, 1, 20).await;
    publish(stack.settings(&[]), orders(1, 5)).await;

    let consumer = spawn_consumer(&stack).await;

    let db = stack.db.db();
    wait_until(DELIVERY, "the 5 earlier orders in MySQL", || async {
        db.order_count(ProductId(1)).await.unwrap() == 5
    })
    .await;
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(15));
    let (stopped, _) = stop(consumer).await;
    stopped.expect("the consumer stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_published_twice_is_written_once() {
    let stack = TestStack::new().await;
    put_product(&stack, 1, 20).await;
    let consumer = spawn_consumer(&stack).await;
    let twice = orders(1, 1).remove(0);
    let mut sent = orders(1, 3);
    sent.insert(1, twice.clone());
    sent.push(twice);

    publish(stack.settings(&[]), sent).await;

    let db = stack.db.db();
    wait_until(DELIVERY, "the 4 distinct orders in MySQL", || async {
        db.order_count(ProductId(1)).await.unwrap() == 4
    })
    .await;
    // Give the duplicate time to arrive, should it have been behind the others.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(db.order_count(ProductId(1)).await.unwrap(), 4);
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(16));
    assert_eq!(stock_flow_rows(&stack, 1).await, 4);
    let (stopped, _) = stop(consumer).await;
    stopped.expect("the consumer stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_consumer_takes_up_where_the_stopped_one_left_off() {
    let stack = TestStack::new().await;
    put_product(&stack, 1, 20).await;
    let db = stack.db.db();
    let first = spawn_consumer(&stack).await;
    publish(stack.settings(&[]), orders(1, 5)).await;
    wait_until(DELIVERY, "the first 5 orders in MySQL", || async {
        db.order_count(ProductId(1)).await.unwrap() == 5
    })
    .await;
    let (stopped, _) = stop(first).await;
    stopped.expect("the first consumer stops cleanly");

    // Accepted while no consumer runs: they wait on the broker.
    publish(stack.settings(&[]), orders(1, 5)).await;
    let second = spawn_consumer(&stack).await;

    wait_until(DELIVERY, "all 10 orders in MySQL", || async {
        db.order_count(ProductId(1)).await.unwrap() == 10
    })
    .await;
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));
    assert_eq!(stock_flow_rows(&stack, 1).await, 10);
    let (stopped, _) = stop(second).await;
    stopped.expect("the second consumer stops cleanly");
}
