//! How often the consumer pulls each queue.
//!
//! The broker answers a waiting pull as soon as a message arrives. At a moderate rate spread
//! over the topic's queues that is one message per pull, and each pull costs the broker, the
//! client and the handler (a MySQL transaction) about what a full one does: at 2,400 orders/s
//! the consumer, MariaDB and the broker's pulls took about a third of a two-core host, most
//! of it in waking threads. So while the consumer keeps up, each queue is pulled at most
//! every `linger` (the client's pull interval, which it waits after a pull that found
//! messages), and one pull, one batch and one transaction carry what arrived meanwhile.
//! A backlog must not wait, though: a batch of half the batch size or more shows one, and the
//! queues are then pulled without pause until a whole `linger` passes without such a batch.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rocketmq_client_rust::DefaultMQPushConsumer;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tracing::debug;

/// The client refuses a pull interval above this many milliseconds.
const MAX_INTERVAL_MS: u64 = 65_535;

/// Whether a batch that shows a backlog of messages was handed over since the last look.
#[derive(Debug)]
pub(crate) struct BacklogSignal {
    seen: AtomicBool,
    /// Messages in a batch that show a backlog.
    batch_threshold: usize,
}

impl BacklogSignal {
    /// Half of `batch_size`: a full batch when the broker caps its pulls below the batch size
    /// (Apache RocketMQ's default cap is 32 messages) still counts.
    pub(crate) fn new(batch_size: u32) -> Self {
        Self {
            seen: AtomicBool::new(false),
            batch_threshold: (batch_size as usize / 2).max(1),
        }
    }

    /// Called with every batch the handler is given.
    pub(crate) fn record(&self, messages: usize) {
        if messages >= self.batch_threshold {
            self.seen.store(true, Ordering::Relaxed);
        }
    }

    fn take(&self) -> bool {
        self.seen.swap(false, Ordering::Relaxed)
    }
}

/// The pull interval for the next `linger`: none while a backlog shows.
fn interval_after(backlog_seen: bool, linger: Duration) -> Duration {
    if backlog_seen { Duration::ZERO } else { linger }
}

/// Looks at `backlog` every `linger` and sets the consumer's pull interval to match. The
/// consumer starts without one (a group may start with a backlog). Abort the task before
/// shutting the consumer down.
pub(crate) fn spawn(
    consumer: Arc<Mutex<DefaultMQPushConsumer>>,
    backlog: Arc<BacklogSignal>,
    linger: Duration,
) -> JoinHandle<()> {
    let linger = linger.min(Duration::from_millis(MAX_INTERVAL_MS));
    tokio::spawn(async move {
        let mut current = Duration::ZERO;
        let mut looks = tokio::time::interval(linger);
        looks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            looks.tick().await;
            let next = interval_after(backlog.take(), linger);
            if next != current {
                consumer
                    .lock()
                    .await
                    .set_pull_interval(next.as_millis() as u64);
                debug!(
                    pull_interval_ms = next.as_millis(),
                    "Pull interval changed."
                );
                current = next;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINGER: Duration = Duration::from_millis(20);

    #[test]
    fn a_batch_of_half_the_batch_size_or_more_shows_a_backlog() {
        let backlog = BacklogSignal::new(64);
        backlog.record(31);
        assert!(!backlog.take(), "31 of 64 is keeping up");
        backlog.record(32);
        assert!(backlog.take());
        assert!(
            !backlog.take(),
            "seen once, then forgotten until the next one"
        );
    }

    #[test]
    fn a_backlog_is_pulled_without_pause_and_a_trickle_lingers() {
        assert_eq!(interval_after(true, LINGER), Duration::ZERO);
        assert_eq!(interval_after(false, LINGER), LINGER);
    }

    #[test]
    fn a_batch_size_of_one_still_has_a_threshold() {
        let backlog = BacklogSignal::new(1);
        backlog.record(1);
        assert!(backlog.take());
    }
}
