//! The order backlog in **orders**, for the autoscaler. The broker counts messages, and under
//! a crowd the gateway puts up to `gateway.orders_per_message` winners in one message, so a
//! lag of 100 messages may be 100 orders or 6,400. Every `consumer.backlog_export_secs` the
//! consumer asks the broker for the group's backlog in messages ([`OrderBacklog`]) and
//! exports it, and that times the mean orders per message of the batches it wrote lately,
//! as `seckill_order_backlog_orders`. Every replica asks and exports the same figures: the
//! autoscaler reads their `max`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use order_queue::OrderBacklog;
use platform::shutdown::Shutdown;

/// How much each batch moves the mean: about the last ten batches count.
const WEIGHT_OF_A_BATCH: f64 = 0.2;

/// The mean orders per message of the recent batches (an exponentially weighted mean).
/// Before the first batch it is 1, the fewest a message carries: the backlog is then
/// counted low rather than guessed high.
#[derive(Debug)]
pub struct OrdersPerMessage(AtomicU64);

impl Default for OrdersPerMessage {
    fn default() -> Self {
        Self(AtomicU64::new(1.0_f64.to_bits()))
    }
}

impl OrdersPerMessage {
    /// A batch of `messages` that carried `orders`.
    pub fn observe(&self, messages: usize, orders: usize) {
        if messages == 0 {
            return;
        }
        let batch = orders as f64 / messages as f64;
        // Only the writer's threads update it, and a lost update only lags the mean by one
        // batch: no compare-and-swap loop needed.
        let mean = self.mean();
        let next = mean + WEIGHT_OF_A_BATCH * (batch - mean);
        self.0.store(next.max(1.0).to_bits(), Ordering::Relaxed);
    }

    pub fn mean(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    /// A backlog of `messages`, in orders.
    pub fn orders_in(&self, messages: u64) -> f64 {
        messages as f64 * self.mean()
    }
}

/// Exports the backlog every `every` until `shutdown`, then closes the broker client.
pub async fn export(
    backlog: OrderBacklog,
    per_message: Arc<OrdersPerMessage>,
    every: Duration,
    shutdown: Shutdown,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shutdown.cancelled() => break,
        }
        match backlog.pending().await {
            Ok(messages) => {
                metrics::gauge!("seckill_order_backlog_messages").set(messages as f64);
                metrics::gauge!("seckill_order_backlog_orders")
                    .set(per_message.orders_in(messages));
            }
            // The gauges keep their last value; the failures show that it is stale.
            Err(error) => {
                metrics::counter!("seckill_order_backlog_probe_failures_total").increment(1);
                tracing::warn!(%error, "Cannot read the order backlog from the broker.");
            }
        }
    }
    backlog.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_any_batch_a_message_counts_as_one_order() {
        assert_eq!(OrdersPerMessage::default().orders_in(100), 100.0);
    }

    #[test]
    fn messages_of_a_crowd_count_as_the_orders_they_carried() {
        let per_message = OrdersPerMessage::default();
        for _ in 0..40 {
            per_message.observe(4, 256);
        }
        let orders = per_message.orders_in(100);
        assert!((6_390.0..=6_400.0).contains(&orders), "{orders}");
    }

    #[test]
    fn one_odd_batch_moves_the_mean_only_a_little() {
        let per_message = OrdersPerMessage::default();
        for _ in 0..40 {
            per_message.observe(1, 10);
        }
        per_message.observe(1, 64);
        let mean = per_message.mean();
        assert!((19.0..=21.0).contains(&mean), "{mean}");
    }

    #[test]
    fn an_empty_batch_changes_nothing() {
        let per_message = OrdersPerMessage::default();
        per_message.observe(0, 0);
        assert_eq!(per_message.mean(), 1.0);
    }
}
