//! What the order and the deadline subscribers share: how a clustering push consumer is
//! built, started and stopped, and how a listener's answer (or panic) becomes the client's
//! consume status.

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use rocketmq_client_rust::{
    ConsumeConcurrentlyStatus, DefaultMQPushConsumer, MQPushConsumer, MessageListenerConcurrently,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;
use tracing::{error, info};

use crate::{Delivery, MqError, MqRuntime, MqSettings, Result};

/// How long shutdown waits for listener calls already under way. It matches the blocking
/// pool's task timeout: no call can legitimately take longer. The client's default is 0,
/// which would abandon calls in flight at once.
const SHUTDOWN_GRACE_MS: u64 = 30_000;

/// One consumer's group, subscription and sizes.
pub(crate) struct PushConsumerSpec<'a> {
    /// Where the name servers are, and the credentials the consumer signs with.
    pub settings: &'a MqSettings,
    pub group: &'a str,
    pub topic: &'a str,
    pub tag_expression: &'a str,
    /// Most messages handed to one listener call.
    pub batch_size: u32,
    /// Most messages fetched from one queue per pull request.
    pub pull_batch_size: u32,
    /// Most listener calls at once (across queues).
    pub consume_threads: u32,
    /// Redeliveries before a message goes to the dead-letter queue (`%DLQ%<group>`).
    pub max_reconsume_times: i32,
}

/// Joins `spec.group` (clustering: the topic's queues are shared among the group's members),
/// subscribes, registers `listener` and starts pulling. A group new to the broker starts
/// from the **first** retained message rather than the last: what was sent before the
/// group's first start is still delivered (redelivery is harmless, loss is not).
pub(crate) async fn start_push_consumer(
    runtime: &MqRuntime,
    spec: &PushConsumerSpec<'_>,
    listener: impl MessageListenerConcurrently + 'static,
) -> Result<DefaultMQPushConsumer> {
    let started = Instant::now();
    let threads = spec.consume_threads.max(1);
    let mut consumer = DefaultMQPushConsumer::builder(runtime.client())
        .consumer_group(spec.group)
        .name_server_addr(spec.settings.name_server.as_str())
        .rpc_hook(spec.settings.acl_hook())
        .message_model(MessageModel::Clustering)
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .consume_message_batch_max_size(spec.batch_size.max(1))
        .pull_batch_size(spec.pull_batch_size.max(1))
        .consume_thread_min(threads)
        .consume_thread_max(threads)
        .max_reconsume_times(spec.max_reconsume_times)
        .await_termination_millis_when_shutdown(SHUTDOWN_GRACE_MS)
        .build();
    consumer
        .subscribe(spec.topic, spec.tag_expression)
        .await
        .map_err(MqError::client("consumer subscribe"))?;
    consumer.register_message_listener_concurrently(listener);
    consumer
        .start()
        .await
        .map_err(MqError::client("consumer start"))?;
    info!(
        consumer_group = spec.group,
        topic = spec.topic,
        elapsed_ms = started.elapsed().as_millis(),
        "Consumer started."
    );
    Ok(consumer)
}

/// Stops `consumer`. What the client does, in order: it stops accepting pulled messages for
/// handling (those pulled but not yet started are dropped — their offsets were never
/// committed, so the group gets them again later); waits up to 30 s for listener calls
/// already under way to finish and be acknowledged (sent back for retry when so answered);
/// persists the group's consumer offsets to the broker; unregisters from the group so the
/// broker rebalances its queues to the remaining members. A call still running after 30 s
/// is abandoned and its messages will be redelivered.
pub(crate) async fn stop_push_consumer(consumer: &mut DefaultMQPushConsumer, group: &str) {
    let started = Instant::now();
    consumer.shutdown().await;
    info!(
        consumer_group = group,
        elapsed_ms = started.elapsed().as_millis(),
        "Consumer shut down."
    );
}

/// A handler's answer for what it was given: done, or to be redelivered later.
pub(crate) trait Verdict {
    fn retry_later() -> Self;
    fn is_done(&self) -> bool;
}

/// Runs `handle` for `deliveries` and maps its verdict onto the client's status. A panic is
/// caught here rather than left to the client so that the log names the messages, and
/// counts as a retry: the broker redelivers them later.
pub(crate) fn consume_guarded<V: Verdict>(
    deliveries: &[Delivery],
    handle: impl FnOnce() -> V,
) -> ConsumeConcurrentlyStatus {
    let verdict = std::panic::catch_unwind(AssertUnwindSafe(handle)).unwrap_or_else(|_| {
        let msg_ids: Vec<&str> = deliveries.iter().map(|d| d.msg_id.as_str()).collect();
        error!(
            ?msg_ids,
            "Handler panicked; the messages will be redelivered."
        );
        V::retry_later()
    });
    if verdict.is_done() {
        ConsumeConcurrentlyStatus::ConsumeSuccess
    } else {
        ConsumeConcurrentlyStatus::ReconsumeLater
    }
}
