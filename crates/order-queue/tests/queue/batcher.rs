//! Winners queued while the sends are busy leave together, and share their message's fate;
//! a few winners wait for the send under way, a quarter message leaves beside it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::{OrderPlaced, OrderToken};
use order_queue::{BatchTuning, OrderBatcher, TxDecision};

use crate::helpers::{Stack, WAIT, order};

const ORDERS: usize = 40;

/// A batcher of messages of up to 16 orders, `in_flight` sends at once, whose local
/// transaction commits each of `orders`.
fn committing_batcher(stack: &Stack, orders: &[OrderPlaced], in_flight: usize) -> OrderBatcher {
    for order in orders {
        stack
            .local
            .script(&order.order_token, TxDecision::Commit, TxDecision::Commit);
    }
    OrderBatcher::start(
        Arc::new(stack.publisher.clone()),
        BatchTuning {
            max_orders: 16,
            in_flight,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_queued_behind_a_busy_send_share_a_message_and_each_arrives_once() {
    let stack = Stack::start("batcher").await;
    let orders: Vec<_> = (0..ORDERS).map(|_| order()).collect();
    let batcher = committing_batcher(&stack, &orders, 1);

    let sends: Vec<_> = orders
        .iter()
        .cloned()
        .map(|order| {
            let batcher = batcher.clone();
            tokio::spawn(async move { batcher.send(order).await })
        })
        .collect();
    for send in sends {
        let decision = send.await.unwrap().expect("sent");
        assert_eq!(decision, TxDecision::Commit);
    }

    let executed = stack.local.executed.lock().unwrap().clone();
    assert_eq!(executed.iter().sum::<usize>(), ORDERS, "{executed:?}");
    assert!(
        executed.len() < ORDERS && executed.iter().all(|&n| n <= 16),
        "one send at a time must batch, 16 at most: {executed:?}"
    );

    let sent: BTreeSet<OrderToken> = orders.iter().map(|o| o.order_token.clone()).collect();
    let started = Instant::now();
    loop {
        let delivered = stack.recorder.delivered_orders();
        let tokens: BTreeSet<OrderToken> =
            delivered.iter().map(|o| o.order_token.clone()).collect();
        if tokens == sent {
            assert_eq!(delivered.len(), ORDERS, "no order twice");
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "{} of {ORDERS} delivered",
            tokens.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    drop(batcher);
    stack.shutdown().await;
}

/// Long enough for a send to leave and reach the local transaction, were it allowed to.
const SETTLE: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_few_winners_wait_for_the_send_under_way_and_a_quarter_message_leaves_beside_it() {
    let stack = Stack::start("batcher-quarter").await;
    let orders: Vec<_> = (0..5).map(|_| order()).collect();
    // Four sends at most; a quarter of a 16-order message is 4.
    let batcher = committing_batcher(&stack, &orders, 4);
    let send = |order: &OrderPlaced| {
        let (batcher, order) = (batcher.clone(), order.clone());
        tokio::spawn(async move { batcher.send(order).await })
    };
    let executed = || stack.local.executed.lock().unwrap().clone();

    stack.local.hold(&orders[0].order_token);
    let mut sends = vec![send(&orders[0])];
    wait_until(
        || executed().len() == 1,
        "the first send reaches its local transaction",
    )
    .await;

    sends.extend(orders[1..4].iter().map(send));
    tokio::time::sleep(SETTLE).await;
    assert_eq!(
        executed(),
        vec![1],
        "three winners wait for the send under way"
    );

    sends.push(send(&orders[4]));
    wait_until(
        || executed().len() == 2,
        "the fourth waiting winner's message",
    )
    .await;
    assert_eq!(
        executed(),
        vec![1, 4],
        "four waiting winners leave together beside the held send"
    );

    stack.local.release();
    for send in sends {
        assert_eq!(send.await.unwrap().expect("sent"), TxDecision::Commit);
    }
    drop(batcher);
    stack.shutdown().await;
}

async fn wait_until(done: impl Fn() -> bool, what: &str) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < WAIT, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
