use order_queue::{MqRuntime, OrderPublisher, TxDecision, ensure_topic};
use std::sync::Arc;

use crate::helpers::{Scripted, order, settings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensuring_a_topic_twice_is_harmless_and_it_takes_sends_at_once() {
    let settings = settings("topic");
    let runtime = MqRuntime::new("oq-topic", 4).expect("runtime builds");
    ensure_topic(&runtime, &settings)
        .await
        .expect("first call creates");
    ensure_topic(&runtime, &settings)
        .await
        .expect("second call finds it");

    let local = Arc::new(Scripted::default());
    let publisher = OrderPublisher::start(&runtime, &settings, local.clone())
        .await
        .expect("publisher starts");
    let order = order();
    local.script(&order.order_token, TxDecision::Commit, TxDecision::Commit);
    let decision = publisher
        .send_in_transaction(vec![order.clone()], tracing::Span::none())
        .await
        .expect("half message stored");
    assert_eq!(decision, TxDecision::Commit);

    publisher.shutdown().await;
    let after = publisher
        .send_in_transaction(vec![order.clone()], tracing::Span::none())
        .await;
    assert!(
        matches!(after, Err(order_queue::MqError::ShutDown)),
        "a send after shutdown answered {after:?}"
    );
    runtime.shutdown().await;
}
