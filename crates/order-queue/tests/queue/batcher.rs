//! Winners queued while the sends are busy leave together, and share their message's fate.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use domain::OrderToken;
use order_queue::{BatchTuning, OrderBatcher, TxDecision};

use crate::helpers::{Stack, WAIT, order};

const ORDERS: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_queued_behind_a_busy_send_share_a_message_and_each_arrives_once() {
    let stack = Stack::start("batcher").await;
    let orders: Vec<_> = (0..ORDERS).map(|_| order()).collect();
    for order in &orders {
        stack
            .local
            .script(&order.order_token, TxDecision::Commit, TxDecision::Commit);
    }
    let batcher = OrderBatcher::start(
        Arc::new(stack.publisher.clone()),
        BatchTuning {
            max_orders: 16,
            in_flight: 1,
        },
    );

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
