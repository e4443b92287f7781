//! While the consumer keeps up, each queue is pulled at most once per linger, so what
//! trickles in arrives a few messages to a batch; a backlog is pulled without pause.

use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::helpers::{Stack, WAIT, order, tuning};

const LINGER: Duration = Duration::from_millis(500);

/// A stack whose consumer lingers, once it has settled into lingering: its queues are
/// assigned, a first message came through and a whole linger passed without a backlog.
async fn lingering_stack(test: &str) -> Stack {
    let stack = Stack::start_with(
        test,
        order_queue::ConsumerTuning {
            linger: LINGER,
            ..tuning()
        },
    )
    .await;
    let first = order();
    stack.publisher.publish(&first, None).await.expect("stored");
    stack
        .recorder
        .wait_for(&first.order_token, 1, "the first message")
        .await;
    tokio::time::sleep(LINGER * 2).await;
    stack
}

async fn wait_for_messages(stack: &Stack, count: usize) {
    let started = Instant::now();
    while stack.recorder.batches_and_messages().1 < count {
        assert!(
            started.elapsed() < WAIT,
            "{} of {count} messages in {WAIT:?}",
            stack.recorder.batches_and_messages().1
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_that_trickle_in_arrive_several_to_a_batch() {
    let stack = lingering_stack("pace-trickle").await;
    let (batches_before, _) = stack.recorder.batches_and_messages();

    // 40 messages 10 ms apart over the topic's 4 queues: without a linger each arrives on
    // its own, as its queue's waiting pull is answered at once.
    for _ in 0..40 {
        stack
            .publisher
            .publish(&order(), None)
            .await
            .expect("stored");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wait_for_messages(&stack, 41).await;

    let (batches, _) = stack.recorder.batches_and_messages();
    let batches = batches - batches_before;
    assert!(
        batches <= 20,
        "40 trickling messages came in {batches} batches, expected at most 20"
    );
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_is_pulled_without_waiting_a_linger_between_pulls() {
    let stack = lingering_stack("pace-backlog").await;

    // 2,000 messages at once: 500 a queue, which at one pull of at most 32 per linger would
    // take some 16 lingers (8 s) to pull.
    const BURST: usize = 2_000;
    const SENDERS: usize = 16;
    let mut senders = JoinSet::new();
    for _ in 0..SENDERS {
        let publisher = stack.publisher.clone();
        senders.spawn(async move {
            for _ in 0..BURST / SENDERS {
                publisher.publish(&order(), None).await.expect("stored");
            }
        });
    }
    while let Some(sender) = senders.join_next().await {
        sender.unwrap();
    }
    let published = Instant::now();
    wait_for_messages(&stack, BURST + 1).await;

    let took = published.elapsed();
    assert!(
        took < LINGER * 8,
        "the backlog took {took:?} to pull after the last send, at most {:?} expected",
        LINGER * 8
    );
    stack.shutdown().await;
}
