use std::sync::Arc;
use std::time::{Duration, Instant};

use order_queue::{MqRuntime, OrderBacklog, OrderPublisher, OrderSubscriber, ensure_topic};

use crate::helpers::{Recorder, Scripted, WAIT, order, settings, tuning};

/// Polls the backlog until `done` holds for it; panics after [`WAIT`].
async fn wait_for_backlog(backlog: &OrderBacklog, what: &str, done: impl Fn(u64) -> bool) {
    let started = Instant::now();
    loop {
        let pending = backlog.pending().await.expect("consume stats answer");
        if done(pending) {
            return;
        }
        assert!(
            started.elapsed() < WAIT,
            "{what}: backlog still {pending} after {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_counts_orders_no_consumer_has_written_yet() {
    let settings = settings("backlog");
    let runtime = MqRuntime::new("oq-backlog", 8).expect("runtime builds");
    ensure_topic(&runtime, &settings).await.expect("topic");
    let publisher = OrderPublisher::start(&runtime, &settings, Arc::new(Scripted::default()))
        .await
        .expect("publisher starts");
    let backlog = OrderBacklog::start(&runtime, &settings)
        .await
        .expect("probe starts");

    // Before any consumer of the group has run (nor committed anything), its whole
    // queue is ahead of it.
    let early: Vec<_> = (0..2).map(|_| order()).collect();
    for order in &early {
        publisher.publish(order, None).await.expect("stored");
    }
    wait_for_backlog(&backlog, "before any consumer", |pending| pending == 2).await;

    // A consumer writes them; then it stops, and orders pile up.
    let recorder = Arc::new(Recorder::default());
    let first = OrderSubscriber::start(&runtime, &settings, tuning(), recorder.clone())
        .await
        .expect("subscriber starts");
    for order in &early {
        recorder
            .wait_for(&order.order_token, 1, "early order")
            .await;
    }
    first.shutdown().await;
    wait_for_backlog(&backlog, "after the first consumer", |pending| pending == 0).await;

    let queued: Vec<_> = (0..3).map(|_| order()).collect();
    for order in &queued {
        publisher.publish(order, None).await.expect("stored");
    }
    wait_for_backlog(&backlog, "with no consumer", |pending| pending == 3).await;

    let second = OrderSubscriber::start(&runtime, &settings, tuning(), recorder.clone())
        .await
        .expect("subscriber restarts");
    for order in &queued {
        recorder
            .wait_for(&order.order_token, 1, "queued order")
            .await;
    }
    // Consumed offsets reach the broker on the client's periodic offset flush.
    wait_for_backlog(&backlog, "after consuming", |pending| pending == 0).await;

    second.shutdown().await;
    backlog.shutdown().await;
    publisher.shutdown().await;
    runtime.shutdown().await;
}
