//! How many order messages the consumer group has still to consume, as the broker counts
//! them: for every queue of the order topic and of the group's retry topic, the broker's
//! end offset minus the group's committed offset.
//!
//! The gateway asks before it rebuilds a product's Redis state from MySQL after Redis lost
//! it: an order still in the queue took its unit from the old Redis stock but is not in
//! MySQL yet, so a rebuild before the backlog is empty would sell that unit again.
//!
//! Not counted: messages waiting out a reconsume delay (the broker holds them in its
//! schedule topic until they reappear in the retry topic) and messages in the DLQ. The
//! first reappear within the delay; the second are reconcile's (missing orders).

use rocketmq_client_rust::{DefaultMQAdminExt, MQAdminReadExt};
use tokio::sync::Mutex;

use crate::{MqError, MqRuntime, MqSettings, Result};

pub struct OrderBacklog {
    /// Starting and stopping take it mutably; a question now and then (an operator's reload)
    /// does not need to run in parallel.
    admin: Mutex<DefaultMQAdminExt>,
    consumer_group: String,
}

impl OrderBacklog {
    /// An admin client on `runtime`, under an admin group of its own.
    pub async fn start(runtime: &MqRuntime, settings: &MqSettings) -> Result<Self> {
        let mut admin = DefaultMQAdminExt::with_admin_ext_group(
            runtime.client(),
            format!("{}-backlog-probe", settings.producer_group),
        );
        admin.set_namesrv_addr(settings.name_server.as_str());
        MQAdminReadExt::start(&mut admin)
            .await
            .map_err(MqError::client("backlog probe start"))?;
        Ok(Self {
            admin: Mutex::new(admin),
            consumer_group: settings.consumer_group.clone(),
        })
    }

    /// Messages stored but not yet consumed by the order consumers, over the order topic
    /// and the group's retry topic (0 when every queue is consumed to its end).
    pub async fn pending(&self) -> Result<u64> {
        let stats = self
            .admin
            .lock()
            .await
            .examine_consume_stats(self.consumer_group.as_str().into(), None, None, None, None)
            .await
            .map_err(MqError::client("consume stats"))?;
        Ok(stats
            .get_offset_table()
            .values()
            .map(|queue| {
                // A queue the group has never committed reports a negative offset.
                let consumed = queue.get_consumer_offset().max(0);
                u64::try_from(queue.get_broker_offset() - consumed).unwrap_or(0)
            })
            .sum())
    }

    /// Call before [`MqRuntime::shutdown`].
    pub async fn shutdown(&self) {
        MQAdminReadExt::shutdown(&mut *self.admin.lock().await).await;
    }
}
