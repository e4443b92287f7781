//! Which consumer expires orders: every consumer sends its orders' payment deadlines, and
//! those with `consumer.expire_orders` on act on them when they fall due.

use std::time::Duration;

use domain::{OrderPlaced, OrderStatus};
use test_support::stack::TestStack;

use crate::helpers::{orders, publish, put_product, spawn_consumer_with, stop, wait_until};

const EXPIRE_ORDERS: &str = "SECKILL_CONSUMER__EXPIRE_ORDERS";
const PAYMENT_WINDOW: &str = "SECKILL_ORDERS__PAYMENT_WINDOW_SECS";

/// Generous for a loaded machine: a consumer group new to the broker first waits for its
/// queues to be assigned.
const DELIVERY: Duration = Duration::from_secs(90);

/// How long the writing-only consumer is watched after its orders' one-second payment
/// window: the broker hands a deadline back about when it falls due, so an expirer would
/// have acted well within it.
const WATCHED: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_with_the_expirer_off_writes_orders_and_leaves_their_deadlines_to_one_with_it_on()
 {
    let stack = TestStack::new().await;
    put_product(&stack, 1, 20).await;
    let writing_only =
        spawn_consumer_with(&stack, &[(EXPIRE_ORDERS, "false"), (PAYMENT_WINDOW, "1")]).await;
    let sent = orders(1, 3);

    publish(stack.settings(&[]), sent.clone()).await;
    wait_until(DELIVERY, "the 3 orders written", || {
        all_in_status(&stack, &sent, OrderStatus::Confirmed)
    })
    .await;
    tokio::time::sleep(WATCHED).await;

    assert!(
        all_in_status(&stack, &sent, OrderStatus::Confirmed).await,
        "orders expired by a consumer with the expirer off"
    );
    let (stopped, _) = stop(writing_only).await;
    stopped.expect("the writing-only consumer stops cleanly");

    let expiring = spawn_consumer_with(&stack, &[(PAYMENT_WINDOW, "1")]).await;
    let waited = wait_until(DELIVERY, "the 3 orders expired", || {
        all_in_status(&stack, &sent, OrderStatus::Expired)
    })
    .await;
    eprintln!("the deadlines acted on {waited:?} after the expiring consumer started");
    assert_eq!(
        stack.db.db().stock(domain::ProductId(1)).await.unwrap(),
        Some(20),
        "the expired orders' units are back in MySQL"
    );
    let (stopped, _) = stop(expiring).await;
    stopped.expect("the expiring consumer stops cleanly");
}

async fn all_in_status(stack: &TestStack, sent: &[OrderPlaced], status: OrderStatus) -> bool {
    for order in sent {
        let row = stack.db.db().order(&order.order_token).await.unwrap();
        if row.map(|row| row.status) != Some(status) {
            return false;
        }
    }
    true
}
