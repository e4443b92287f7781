use std::time::Instant;

use domain::OrderPlaced;
use order_queue::TxDecision;

use crate::helpers::{Stack, TRACEPARENT, order};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answered_retry_later_is_redelivered_with_reconsume_times_at_least_one() {
    let stack = Stack::start("retry").await;
    let order = order().with_traceparent(Some(TRACEPARENT.into()));
    stack
        .local
        .script(&order.order_token, TxDecision::Commit, TxDecision::Commit);
    stack.recorder.retry_once(&order.order_token);

    let sent = Instant::now();
    stack
        .publisher
        .send_in_transaction(vec![order.clone()], tracing::Span::none())
        .await
        .expect("half message stored");

    let seen = stack
        .recorder
        .wait_for(&order.order_token, 2, "redelivery after RetryLater")
        .await;
    eprintln!(
        "[retry] first delivery {:?} after send, redelivery {:?} after the first",
        seen[0].1 - sent,
        seen[1].1 - seen[0].1
    );
    assert_eq!(seen[0].0.reconsume_times, 0);
    let again = &seen[1].0;
    assert!(again.reconsume_times >= 1, "redelivered with {again:?}");
    assert_eq!(OrderPlaced::decode(&again.body).unwrap(), order);
    assert_eq!(again.key, seen[0].0.key);
    assert_eq!(again.traceparent.as_deref(), Some(TRACEPARENT));
    assert_eq!(
        again.msg_id, seen[0].0.msg_id,
        "the unique id changed on redelivery"
    );

    stack.shutdown().await;
}
