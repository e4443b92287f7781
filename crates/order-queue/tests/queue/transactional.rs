use std::time::{Duration, Instant};

use domain::OrderPlaced;
use order_queue::TxDecision;

use crate::helpers::{Stack, TRACEPARENT, order};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_transactional_message_is_delivered_with_its_key_body_and_traceparent() {
    let stack = Stack::start("commit").await;
    let order = order().with_traceparent(Some(TRACEPARENT.into()));
    stack
        .local
        .script(&order.order_token, TxDecision::Commit, TxDecision::Commit);

    let sent = Instant::now();
    let decision = stack
        .publisher
        .send_in_transaction(vec![order.clone()], tracing::Span::none())
        .await
        .expect("half message stored");
    eprintln!("[commit] send_in_transaction took {:?}", sent.elapsed());
    assert_eq!(decision, TxDecision::Commit);

    let seen = stack
        .recorder
        .wait_for(&order.order_token, 1, "committed message")
        .await;
    eprintln!("[commit] delivered {:?} after send", seen[0].1 - sent);
    // Long enough for a stray check-back to commit the message a second time.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let seen = stack.recorder.of(&order.order_token);
    // Delivery is at least once: a consumer that starts while the group rebalances may be
    // handed the same stored message again before its offset is committed, and the
    // consumer's unique order token absorbs that. What must never happen is a second
    // stored message (a new msg id), which a commit repeated by a check-back would make.
    let first = &seen[0].0;
    for (delivery, _) in &seen {
        assert_eq!(delivery.msg_id, first.msg_id, "stored twice: {seen:?}");
    }
    assert!(!first.msg_id.is_empty());
    assert_eq!(
        first.key.as_deref(),
        Some(order.order_token.to_string().as_str())
    );
    assert_eq!(OrderPlaced::decode(&first.body).unwrap(), order);
    assert_eq!(first.traceparent.as_deref(), Some(TRACEPARENT));
    assert_eq!(first.reconsume_times, 0);

    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_transactional_message_is_never_delivered() {
    let stack = Stack::start("rollback").await;
    let rolled_back = order();
    let marker = order();
    stack.local.script(
        &rolled_back.order_token,
        TxDecision::Rollback,
        TxDecision::Rollback,
    );
    stack
        .local
        .script(&marker.order_token, TxDecision::Commit, TxDecision::Commit);

    let decision = stack
        .publisher
        .send_in_transaction(vec![rolled_back.clone()], tracing::Span::none())
        .await
        .expect("half message stored");
    assert_eq!(decision, TxDecision::Rollback);
    let decision = stack
        .publisher
        .send_in_transaction(vec![marker.clone()], tracing::Span::none())
        .await
        .expect("half message stored");
    assert_eq!(decision, TxDecision::Commit);

    stack
        .recorder
        .wait_for(&marker.order_token, 1, "committed marker")
        .await;
    // Past the marker, and past a few of the broker's transaction check rounds.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let seen = stack.recorder.of(&rolled_back.order_token);
    assert!(
        seen.is_empty(),
        "a rolled-back message was delivered: {seen:?}"
    );

    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_local_transaction_is_resolved_by_the_check_back_and_delivered() {
    let stack = Stack::start("unknown").await;
    let order = order().with_traceparent(Some(TRACEPARENT.into()));
    stack
        .local
        .script(&order.order_token, TxDecision::Unknown, TxDecision::Commit);

    let sent = Instant::now();
    let decision = stack
        .publisher
        .send_in_transaction(vec![order.clone()], tracing::Span::none())
        .await
        .expect("half message stored");
    assert_eq!(decision, TxDecision::Unknown);

    let seen = stack
        .recorder
        .wait_for(&order.order_token, 1, "message committed by check-back")
        .await;
    let checked = stack
        .local
        .first_check_of(&order.order_token)
        .expect("delivered without a check-back");
    eprintln!(
        "[unknown] first check-back {:?} after send, delivered {:?} after send",
        checked - sent,
        seen[0].1 - sent
    );
    let delivery = &seen[0].0;
    assert_eq!(OrderPlaced::decode(&delivery.body).unwrap(), order);
    assert_eq!(delivery.traceparent.as_deref(), Some(TRACEPARENT));

    stack.shutdown().await;
}
