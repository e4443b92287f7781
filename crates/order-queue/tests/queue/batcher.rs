//! Winners queued while the sends are busy leave together, and share their message's fate;
//! a few winners wait for the send under way, a quarter message leaves beside it, and a
//! winner behind a stalled send leaves on its own once its patience runs out; winners that
//! come one by one within a message's linger share it, and a full message does not linger.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::{OrderPlaced, OrderToken};
use order_queue::{BatchTuning, BatchedSend, OrderBatcher, TxDecision};
use tokio::task::JoinHandle;

use crate::helpers::{Stack, WAIT, order};

const ORDERS: usize = 40;
const MAX_ORDERS: usize = 16;

/// A batcher of messages of up to 16 orders, `in_flight` sends at once, a winner's
/// `patience` behind them and a message's `linger`, whose local transaction commits each of
/// `orders`.
fn committing_batcher(
    stack: &Stack,
    orders: &[OrderPlaced],
    in_flight: usize,
    patience: Duration,
    linger: Duration,
) -> OrderBatcher {
    for order in orders {
        stack
            .local
            .script(&order.order_token, TxDecision::Commit, TxDecision::Commit);
    }
    OrderBatcher::start(
        Arc::new(stack.publisher.clone()),
        BatchTuning {
            max_orders: MAX_ORDERS,
            in_flight,
            patience,
            linger,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_queued_behind_a_busy_send_share_a_message_and_each_arrives_once() {
    let stack = Stack::start("batcher").await;
    let orders: Vec<_> = (0..ORDERS).map(|_| order()).collect();
    let batcher = committing_batcher(&stack, &orders, 1, PATIENT, NO_LINGER);

    let sends: Vec<_> = orders
        .iter()
        .map(|order| spawn_send(&batcher, order))
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

/// Longer than any test here waits: winners wait for the send under way.
const PATIENT: Duration = Duration::from_secs(60);

/// A message leaves as soon as a send is free for it.
const NO_LINGER: Duration = Duration::ZERO;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_few_winners_wait_for_the_send_under_way_and_a_quarter_message_leaves_beside_it() {
    let stack = Stack::start("batcher-quarter").await;
    let orders: Vec<_> = (0..5).map(|_| order()).collect();
    // Four sends at most; a quarter of a 16-order message is 4.
    let batcher = committing_batcher(&stack, &orders, 4, PATIENT, NO_LINGER);
    let send = |order: &OrderPlaced| spawn_send(&batcher, order);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_winner_behind_a_stalled_send_leaves_on_its_own_once_its_patience_runs_out() {
    let stack = Stack::start("batcher-patience").await;
    let orders: Vec<_> = (0..2).map(|_| order()).collect();
    let patience = SETTLE;
    let batcher = committing_batcher(&stack, &orders, 4, patience, NO_LINGER);
    let executed = || stack.local.executed.lock().unwrap().clone();

    stack.local.hold(&orders[0].order_token);
    let held = spawn_send(&batcher, &orders[0]);
    wait_until(
        || executed().len() == 1,
        "the first send reaches its local transaction",
    )
    .await;

    let queued_at = Instant::now();
    let lone = tokio::time::timeout(WAIT, batcher.send(orders[1].clone(), tracing::Span::none()))
        .await
        .expect("the lone winner is held as long as the stalled send");
    assert_eq!(lone.expect("sent"), TxDecision::Commit);
    assert!(
        queued_at.elapsed() >= patience,
        "it waited for the send under way first, {:?} of {patience:?}",
        queued_at.elapsed()
    );
    assert!(!held.is_finished(), "the first send is still held");
    assert_eq!(executed(), vec![1, 1], "the lone winner's own message");

    stack.local.release();
    assert_eq!(held.await.unwrap().expect("sent"), TxDecision::Commit);
    drop(batcher);
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn winners_arriving_one_by_one_within_the_linger_leave_together_once_it_is_over() {
    let stack = Stack::start("batcher-linger").await;
    let orders: Vec<_> = (0..5).map(|_| order()).collect();
    let linger = SETTLE * 2;
    // Every send free: only the linger can hold the first winner back.
    let batcher = committing_batcher(&stack, &orders, 4, PATIENT, linger);
    let executed = || stack.local.executed.lock().unwrap().clone();

    let first_queued = Instant::now();
    let mut sends = Vec::new();
    for order in &orders {
        sends.push(spawn_send(&batcher, order));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(SETTLE).await;
    assert_eq!(
        executed(),
        Vec::<usize>::new(),
        "no message within the linger"
    );

    for send in sends {
        assert_eq!(send.await.unwrap().expect("sent"), TxDecision::Commit);
    }
    assert!(
        first_queued.elapsed() >= linger,
        "the first winner lingered, {:?} of {linger:?}",
        first_queued.elapsed()
    );
    assert_eq!(executed(), vec![5], "one message for the five");
    drop(batcher);
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_message_leaves_without_waiting_for_its_linger() {
    let stack = Stack::start("batcher-full").await;
    let orders: Vec<_> = (0..MAX_ORDERS).map(|_| order()).collect();
    // A linger far beyond the test's wait: only a full message can leave.
    let batcher = committing_batcher(&stack, &orders, 4, PATIENT, WAIT * 60);

    let sends: Vec<_> = orders
        .iter()
        .map(|order| spawn_send(&batcher, order))
        .collect();
    for send in sends {
        let decision = tokio::time::timeout(WAIT, send)
            .await
            .expect("a full message does not linger");
        assert_eq!(decision.unwrap().expect("sent"), TxDecision::Commit);
    }
    assert_eq!(
        stack.local.executed.lock().unwrap().clone(),
        vec![MAX_ORDERS]
    );
    drop(batcher);
    stack.shutdown().await;
}

/// Sends `order` through `batcher` from a task of its own.
fn spawn_send(batcher: &OrderBatcher, order: &OrderPlaced) -> JoinHandle<BatchedSend> {
    let (batcher, order) = (batcher.clone(), order.clone());
    tokio::spawn(async move { batcher.send(order, tracing::Span::none()).await })
}

async fn wait_until(done: impl Fn() -> bool, what: &str) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < WAIT, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
