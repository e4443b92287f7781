use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use order_queue::{
    BatchHandler, BatchVerdict, Delivery, MqError, MqRuntime, OrderPublisher, OrderSubscriber,
    TxDecision, ensure_topic,
};

use crate::helpers::{Scripted, WAIT, order, settings, tuning};

/// Takes `hold` over every batch; counts batches started and finished.
struct Slow {
    hold: Duration,
    started: AtomicUsize,
    finished: AtomicUsize,
    keys: Mutex<Vec<Option<String>>>,
}

impl BatchHandler for Slow {
    fn handle(&self, batch: &[Delivery]) -> BatchVerdict {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.keys
            .lock()
            .unwrap()
            .extend(batch.iter().map(|d| d.key.clone()));
        std::thread::sleep(self.hold);
        self.finished.fetch_add(1, Ordering::SeqCst);
        BatchVerdict::Done
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_the_subscriber_lets_the_batch_in_flight_finish_and_hands_back_nothing_else()
{
    let settings = settings("drain");
    let runtime = MqRuntime::new("oq-drain", 4).expect("runtime builds");
    ensure_topic(&runtime, &settings).await.expect("topic");
    let local = Arc::new(Scripted::default());
    let publisher = OrderPublisher::start(&runtime, &settings, local.clone())
        .await
        .expect("publisher starts");
    let slow = Arc::new(Slow {
        hold: Duration::from_secs(3),
        started: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        keys: Mutex::new(Vec::new()),
    });
    let subscriber = OrderSubscriber::start(&runtime, &settings, tuning(), slow.clone())
        .await
        .expect("subscriber starts");

    let order = order();
    local.script(&order.order_token, TxDecision::Commit, TxDecision::Commit);
    publisher
        .send_in_transaction(vec![order.clone()], tracing::Span::none())
        .await
        .expect("half message stored");

    let started = Instant::now();
    while slow.started.load(Ordering::SeqCst) == 0 {
        assert!(
            started.elapsed() < WAIT,
            "the message never reached the handler"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let shutdown_started = Instant::now();
    subscriber.shutdown().await;
    eprintln!(
        "[drain] subscriber shutdown with a batch in flight took {:?}",
        shutdown_started.elapsed()
    );
    assert_eq!(
        slow.finished.load(Ordering::SeqCst),
        1,
        "shutdown returned before the batch in flight finished"
    );

    // The same group, restarted: nothing but the finished batch's own message may come back.
    // rocketmq-client-rust persists offsets after its consume service has stopped, and
    // usually that includes this batch; right after the broker starts, it sometimes does
    // not, and the message is delivered again (seen in CI, about one run in three on a
    // fresh broker). That is at-least-once delivery, which the consumer's idempotent write
    // absorbs; anything else coming back would be a message the shutdown lost track of.
    let again = Arc::new(Slow {
        hold: Duration::ZERO,
        started: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        keys: Mutex::new(Vec::new()),
    });
    let subscriber = OrderSubscriber::start(&runtime, &settings, tuning(), again.clone())
        .await
        .expect("subscriber restarts");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let redelivered = again.keys.lock().unwrap().clone();
    let own_key = Some(order.order_token.to_string());
    assert!(
        redelivered.iter().all(|key| *key == own_key),
        "after a clean shutdown, messages other than the finished batch's came back: {redelivered:?}"
    );
    assert!(
        redelivered.len() <= 1,
        "delivered again more than once: {redelivered:?}"
    );

    subscriber.shutdown().await;
    publisher.shutdown().await;
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_with_no_broker_to_reach_fails_instead_of_reporting_a_decision() {
    let mut settings = settings("nobroker");
    // Nothing listens there.
    settings.name_server = "127.0.0.1:9".into();
    settings.send_timeout_ms = 2_000;
    let runtime = MqRuntime::new("oq-nobroker", 4).expect("runtime builds");
    let local = Arc::new(Scripted::default());
    let started = Instant::now();
    let publisher = OrderPublisher::start(&runtime, &settings, local.clone()).await;
    eprintln!(
        "[nobroker] publisher start answered {:?} after {:?}",
        publisher.as_ref().map(|_| ()),
        started.elapsed()
    );
    if let Ok(publisher) = publisher {
        let order = order();
        local.script(&order.order_token, TxDecision::Commit, TxDecision::Commit);
        let started = Instant::now();
        let sent = publisher
            .send_in_transaction(vec![order.clone()], tracing::Span::none())
            .await;
        eprintln!(
            "[nobroker] send answered {sent:?} after {:?}",
            started.elapsed()
        );
        assert!(
            matches!(sent, Err(MqError::Send(_))),
            "a send with no broker answered {sent:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the send took {:?}",
            started.elapsed()
        );
        publisher.shutdown().await;
    }
    runtime.shutdown().await;
}
