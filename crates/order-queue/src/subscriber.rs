//! Receiving committed orders in batches: a clustering push consumer whose concurrently
//! listener hands each batch to a [`BatchHandler`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocketmq_client_rust::{
    ClientResult, ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, DefaultMQPushConsumer,
    MQPushConsumer, MessageListenerConcurrently,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tracing::{error, info};

use crate::pace::{self, BacklogSignal};
use crate::{Delivery, MqError, MqRuntime, MqSettings, Result};

/// What to do with a whole batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchVerdict {
    /// Every message is handled; the consumer offset moves past them.
    Done,
    /// Redeliver every message of the batch later (the broker's retry backoff: 10 s, 30 s,
    /// 1 min, …); after `max_reconsume_times` a message goes to the group's DLQ.
    RetryLater,
}

/// Handles one batch of up to `ConsumerTuning::batch_size` messages, all from one queue.
///
/// Called **synchronously on the client's blocking pool**, several batches at once (one per
/// queue at most), so it must be `Send + Sync` and may block: an implementation with async
/// work (MySQL, Redis) runs it with `tokio::runtime::Handle::block_on` on a handle to its own
/// runtime. Keep a batch well under 30 s — the pool's task timeout, after which the client
/// stops waiting and retries the batch even though the call goes on running. A panic counts
/// as `RetryLater`. Redelivery is normal (retries, rebalancing, shutdown): handle idempotently.
pub trait BatchHandler: Send + Sync + 'static {
    fn handle(&self, batch: &[Delivery]) -> BatchVerdict;
}

/// How the consumer pulls and batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerTuning {
    /// Most messages handed to one [`BatchHandler::handle`] call.
    pub batch_size: u32,
    /// Most messages fetched from one queue per pull request.
    pub pull_batch_size: u32,
    /// Most batches handled at once (across queues).
    pub consume_threads: u32,
    /// Redeliveries before a message goes to the dead-letter queue (`%DLQ%<group>`).
    pub max_reconsume_times: i32,
    /// While the consumer keeps up, each queue is pulled at most this often, so that a pull
    /// and a batch carry what arrived meanwhile rather than a message each; a backlog is
    /// pulled without pause (see the `pace` module). Zero: every pull at once.
    pub linger: Duration,
}

/// How long shutdown waits for batches already being handled. It matches the blocking pool's
/// task timeout: no batch can legitimately take longer. The client's default is 0, which
/// would abandon in-flight batches at once.
const SHUTDOWN_GRACE_MS: u64 = 30_000;

/// A running consumer; [`OrderSubscriber::shutdown`] stops it.
pub struct OrderSubscriber {
    /// Shared with the pace task, which sets its pull interval.
    consumer: Arc<Mutex<DefaultMQPushConsumer>>,
    pace: Option<JoinHandle<()>>,
    group: String,
}

impl std::fmt::Debug for OrderSubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderSubscriber")
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl OrderSubscriber {
    /// Joins `settings.consumer_group` (clustering: the topic's queues are shared among the
    /// group's members), subscribes to `settings.topic` filtered by `settings.tag` (`*` when
    /// empty) and starts pulling. A group new to the broker starts from the **first** retained
    /// message rather than the last: an order accepted before the consumer's first start is
    /// still delivered (redelivery is harmless, loss is not).
    pub async fn start(
        runtime: &MqRuntime,
        settings: &MqSettings,
        tuning: ConsumerTuning,
        handler: Arc<dyn BatchHandler>,
    ) -> Result<Self> {
        let started = Instant::now();
        let threads = tuning.consume_threads.max(1);
        let mut consumer = DefaultMQPushConsumer::builder(runtime.client())
            .consumer_group(settings.consumer_group.as_str())
            .name_server_addr(settings.name_server.as_str())
            .message_model(MessageModel::Clustering)
            .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
            .consume_message_batch_max_size(tuning.batch_size.max(1))
            .pull_batch_size(tuning.pull_batch_size.max(1))
            .consume_thread_min(threads)
            .consume_thread_max(threads)
            .max_reconsume_times(tuning.max_reconsume_times)
            .await_termination_millis_when_shutdown(SHUTDOWN_GRACE_MS)
            .build();
        consumer
            .subscribe(settings.topic.as_str(), settings.tag_expression())
            .await
            .map_err(MqError::client("consumer subscribe"))?;
        let backlog = Arc::new(BacklogSignal::new(tuning.batch_size));
        consumer.register_message_listener_concurrently(BatchListener {
            handler,
            backlog: Arc::clone(&backlog),
        });
        consumer
            .start()
            .await
            .map_err(MqError::client("consumer start"))?;
        let consumer = Arc::new(Mutex::new(consumer));
        let pace = (!tuning.linger.is_zero())
            .then(|| pace::spawn(Arc::clone(&consumer), backlog, tuning.linger));
        info!(
            consumer_group = %settings.consumer_group,
            topic = %settings.topic,
            elapsed_ms = started.elapsed().as_millis(),
            "Consumer started."
        );
        Ok(Self {
            consumer,
            pace,
            group: settings.consumer_group.clone(),
        })
    }

    /// Stops the consumer. What the client does, in order: it stops accepting pulled
    /// messages for handling (batches pulled but not yet started are dropped — their offsets
    /// were never committed, so the group gets them again later); waits up to 30 s for batches
    /// already in [`BatchHandler::handle`] to finish and be acknowledged (sent back for retry
    /// when `RetryLater`); persists the group's consumer offsets to the broker; unregisters
    /// from the group so the broker rebalances its queues to the remaining members.
    /// A batch still running after 30 s is abandoned and will be redelivered.
    pub async fn shutdown(self) {
        let started = Instant::now();
        if let Some(pace) = self.pace {
            pace.abort();
        }
        self.consumer.lock().await.shutdown().await;
        info!(
            consumer_group = %self.group,
            elapsed_ms = started.elapsed().as_millis(),
            "Consumer shut down."
        );
    }
}

struct BatchListener {
    handler: Arc<dyn BatchHandler>,
    backlog: Arc<BacklogSignal>,
}

impl MessageListenerConcurrently for BatchListener {
    fn consume_message(
        &self,
        messages: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        self.backlog.record(messages.len());
        let batch: Vec<Delivery> = messages
            .iter()
            .map(|message| Delivery::from_ext(message))
            .collect();
        // Caught here rather than left to the client so the log names the batch.
        let verdict = std::panic::catch_unwind(AssertUnwindSafe(|| self.handler.handle(&batch)))
            .unwrap_or_else(|_| {
                let msg_ids: Vec<&str> = batch.iter().map(|d| d.msg_id.as_str()).collect();
                error!(
                    ?msg_ids,
                    "Batch handler panicked; the batch will be redelivered."
                );
                BatchVerdict::RetryLater
            });
        Ok(match verdict {
            BatchVerdict::Done => ConsumeConcurrentlyStatus::ConsumeSuccess,
            BatchVerdict::RetryLater => ConsumeConcurrentlyStatus::ReconsumeLater,
        })
    }
}

#[cfg(test)]
mod tests {
    use domain::{OrderPlaced, OrderToken, ProductId, UserId};
    use rocketmq_model::common::message::message_queue::MessageQueue;

    use super::*;
    use crate::message::order_message;

    struct Fixed(BatchVerdict);

    impl BatchHandler for Fixed {
        fn handle(&self, batch: &[Delivery]) -> BatchVerdict {
            assert_eq!(batch.len(), 2);
            self.0
        }
    }

    struct Panics;

    impl BatchHandler for Panics {
        fn handle(&self, _batch: &[Delivery]) -> BatchVerdict {
            panic!("boom")
        }
    }

    fn consume(handler: impl BatchHandler) -> ConsumeConcurrentlyStatus {
        let order = OrderPlaced::new(OrderToken::new(ProductId(1), 1), UserId(1), 1, 1);
        let message = MessageExt {
            message: order_message("t", "order", &order, None).unwrap(),
            ..MessageExt::default()
        };
        let context = ConsumeConcurrentlyContext::new(MessageQueue::from_parts("t", "b", 0));
        BatchListener {
            handler: Arc::new(handler),
            backlog: Arc::new(BacklogSignal::new(16)),
        }
        .consume_message(&[&message, &message], &context)
        .unwrap()
    }

    #[test]
    fn verdicts_map_onto_the_client_statuses() {
        assert_eq!(
            consume(Fixed(BatchVerdict::Done)),
            ConsumeConcurrentlyStatus::ConsumeSuccess
        );
        assert_eq!(
            consume(Fixed(BatchVerdict::RetryLater)),
            ConsumeConcurrentlyStatus::ReconsumeLater
        );
    }

    #[test]
    fn a_panicking_handler_means_retry_later() {
        assert_eq!(consume(Panics), ConsumeConcurrentlyStatus::ReconsumeLater);
    }
}
