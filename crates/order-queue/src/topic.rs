//! Creating the order and deadline topics at start-up, so that its queue count is ours rather than the
//! broker's auto-create default, and so consumers find a route before the first order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rocketmq_client_rust::DefaultMQProducer;
use tracing::{info, warn};

use crate::{MqError, MqRuntime, MqSettings, Result};

/// The broker's template topic for topic creation: it exists on brokers that allow automatic
/// topic creation (`autoCreateTopicEnable = true`), and names the brokers to create on.
const TEMPLATE_TOPIC: &str = "TBW102";

/// How long a freshly created topic may take to show up on the name server.
const ROUTE_WAIT: Duration = Duration::from_secs(15);
const ROUTE_POLL: Duration = Duration::from_millis(100);

/// Creates `settings.topic` with `settings.queue_count` read and write queues on every broker
/// that serves the template topic `TBW102`, unless the name server already has a route for
/// it; then waits until the route is visible. An existing topic is left as it is, whatever its queue
/// count (an operator may have changed it on purpose). Safe to call from every replica at
/// every start: creation is an update-or-create on the broker.
///
/// The brokers must allow topic creation from clients (`autoCreateTopicEnable = true` on
/// rocketmq-rust); where they do not, create the topic with the admin tool and this only
/// confirms that it exists.
pub async fn ensure_topic(runtime: &MqRuntime, settings: &MqSettings) -> Result<()> {
    ensure_named_topic(runtime, settings, &settings.topic).await
}

/// [`ensure_topic`] for another topic of ours (the deadline topic), created alike.
pub(crate) async fn ensure_named_topic(
    runtime: &MqRuntime,
    settings: &MqSettings,
    topic: &str,
) -> Result<()> {
    // A producer group is registered once per client instance: a fresh name per call keeps
    // concurrent calls on one runtime apart. It lives only as long as this call.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let group = format!(
        "{}-topic-admin-{}",
        settings.producer_group,
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut builder = DefaultMQProducer::builder(runtime.client())
        .producer_group(group.as_str())
        .name_server_addr(settings.name_server.as_str())
        .send_msg_timeout(settings.send_timeout_ms_u32());
    if let Some(hook) = settings.acl_hook() {
        builder = builder.rpc_hook(hook);
    }
    let mut admin = builder.build();
    admin
        .start()
        .await
        .map_err(MqError::client("topic admin producer start"))?;
    let result = ensure_with(&mut admin, topic, settings.queue_count).await;
    admin.shutdown().await;
    result
}

async fn ensure_with(admin: &mut DefaultMQProducer, topic: &str, queue_count: u32) -> Result<()> {
    if let Ok(queues) = admin.fetch_publish_message_queues(topic).await
        && !queues.is_empty()
    {
        if queues.len() != queue_count as usize {
            warn!(
                topic,
                existing = queues.len(),
                configured = queue_count,
                "Topic exists with another queue count; leaving it as it is."
            );
        }
        return Ok(());
    }
    let queue_count = i32::try_from(queue_count.max(1)).unwrap_or(i32::MAX);
    admin
        .create_topic(TEMPLATE_TOPIC, topic, queue_count, HashMap::new())
        .await
        .map_err(MqError::client("topic creation"))?;
    let started = Instant::now();
    while started.elapsed() < ROUTE_WAIT {
        if let Ok(queues) = admin.fetch_publish_message_queues(topic).await
            && !queues.is_empty()
        {
            info!(
                topic,
                queues = queues.len(),
                waited_ms = started.elapsed().as_millis(),
                "Topic created."
            );
            return Ok(());
        }
        tokio::time::sleep(ROUTE_POLL).await;
    }
    Err(MqError::TopicNotVisible {
        topic: topic.to_owned(),
        waited_ms: u64::try_from(ROUTE_WAIT.as_millis()).unwrap_or(u64::MAX),
    })
}
