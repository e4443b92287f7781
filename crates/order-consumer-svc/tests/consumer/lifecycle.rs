//! Starting and stopping the service.

use std::time::{Duration, Instant};

use test_support::stack::TestStack;

use crate::helpers::{spawn_consumer, stop};

/// The subscriber waits up to 30 s for the batches in hand; stopping takes no longer than
/// that plus the client's own shutdown.
pub const GRACE: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_consumer_stops_cleanly_within_the_grace_period() {
    let stack = TestStack::new().await;
    let consumer = spawn_consumer(&stack).await;

    let (stopped, took) = stop(consumer).await;

    stopped.expect("the consumer stops cleanly");
    assert!(took < GRACE, "stopping took {took:?}");
}

/// Builds the consumer as `main` does (on an actix System of its own thread) and returns how
/// `build` ended, or `Err` when it panicked.
async fn build_with(stack: &TestStack, extra: &[(&str, &str)]) -> Result<anyhow::Result<()>, ()> {
    let settings = stack.settings(extra);
    let thread = std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            order_consumer_svc::Application::build(settings)
                .await
                .map(|_built| ())
        })
    });
    tokio::task::spawn_blocking(move || thread.join().map_err(|_| ()))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_cannot_reach_the_broker_fails_to_build_with_an_error() {
    let stack = TestStack::new().await;
    let started = Instant::now();

    // Nothing listens on port 1.
    let built = build_with(&stack, &[("SECKILL_ROCKETMQ__NAME_SERVER", "127.0.0.1:1")]).await;

    let error = built
        .expect("build returns its error rather than panicking")
        .expect_err("no broker, no consumer");
    assert!(
        format!("{error:#}").contains("cannot create the order topic"),
        "{error:#}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_with_an_unusable_redis_key_prefix_fails_to_build_with_an_error() {
    let stack = TestStack::new().await;

    let built = build_with(&stack, &[("SECKILL_REDIS__KEY_PREFIX", "{sk}")]).await;

    let error = built
        .expect("build returns its error rather than panicking")
        .expect_err("a prefix with braces breaks the hash tags");
    assert!(
        format!("{error:#}").contains("cannot set up Redis"),
        "{error:#}"
    );
}
