//! Receiving committed orders in batches: a clustering push consumer whose concurrently
//! listener hands each batch to a [`BatchHandler`].

use std::sync::Arc;
use std::time::Duration;

use rocketmq_client_rust::{
    ClientResult, ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, DefaultMQPushConsumer,
    MessageListenerConcurrently,
};
use rocketmq_model::common::message::message_ext::MessageExt;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::consumer::{
    PushConsumerSpec, Verdict, consume_guarded, start_push_consumer, stop_push_consumer,
};
use crate::pace::{self, BacklogSignal};
use crate::{Delivery, MqRuntime, MqSettings, Result};

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
        let backlog = Arc::new(BacklogSignal::new(tuning.batch_size));
        let spec = PushConsumerSpec {
            settings,
            group: &settings.consumer_group,
            topic: &settings.topic,
            tag_expression: settings.tag_expression(),
            batch_size: tuning.batch_size,
            pull_batch_size: tuning.pull_batch_size,
            consume_threads: tuning.consume_threads,
            max_reconsume_times: tuning.max_reconsume_times,
        };
        let listener = BatchListener {
            handler,
            backlog: Arc::clone(&backlog),
        };
        let consumer = start_push_consumer(runtime, &spec, listener).await?;
        let consumer = Arc::new(Mutex::new(consumer));
        let pace = (!tuning.linger.is_zero())
            .then(|| pace::spawn(Arc::clone(&consumer), backlog, tuning.linger));
        Ok(Self {
            consumer,
            pace,
            group: settings.consumer_group.clone(),
        })
    }

    /// Stops the consumer: see `consumer::stop_push_consumer` for what the client does. In
    /// short, a batch already in [`BatchHandler::handle`] gets up to 30 s to finish and be
    /// acknowledged, the group's offsets are persisted, and whatever was pulled but not yet
    /// handled is redelivered to the group later.
    pub async fn shutdown(self) {
        if let Some(pace) = self.pace {
            pace.abort();
        }
        stop_push_consumer(&mut *self.consumer.lock().await, &self.group).await;
    }
}

impl Verdict for BatchVerdict {
    fn retry_later() -> Self {
        Self::RetryLater
    }

    fn is_done(&self) -> bool {
        *self == Self::Done
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
        Ok(consume_guarded(&batch, || self.handler.handle(&batch)))
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
