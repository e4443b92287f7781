use std::time::Instant;

use domain::OrderPlaced;

use crate::helpers::{Stack, TRACEPARENT, order};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_publish_is_delivered() {
    let stack = Stack::start("publish").await;
    let first = order();

    let sent = Instant::now();
    stack
        .publisher
        .publish(&first, Some(TRACEPARENT))
        .await
        .expect("plain message stored");
    eprintln!(
        "[publish] first publish (starts the plain producer) took {:?}",
        sent.elapsed()
    );

    let seen = stack
        .recorder
        .wait_for(&first.order_token, 1, "plainly published message")
        .await;
    eprintln!("[publish] delivered {:?} after send", seen[0].1 - sent);
    let delivery = &seen[0].0;
    assert_eq!(OrderPlaced::decode(&delivery.body).unwrap(), first);
    assert_eq!(delivery.traceparent.as_deref(), Some(TRACEPARENT));

    let second = order();
    let sent = Instant::now();
    stack
        .publisher
        .publish(&second, None)
        .await
        .expect("plain message stored");
    eprintln!("[publish] second publish took {:?}", sent.elapsed());
    let seen = stack
        .recorder
        .wait_for(&second.order_token, 1, "second plain message")
        .await;
    assert_eq!(seen[0].0.traceparent, None);

    stack.shutdown().await;
}
