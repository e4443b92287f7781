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

use std::future::Future;
use std::pin::Pin;

use rocketmq_client_rust::{DefaultMQAdminExt, MQAdminReadExt};
use tokio::sync::Mutex;

use crate::{MqError, MqRuntime, MqSettings, Result};

pub struct OrderBacklog {
    probe: Box<dyn Probe>,
}

/// The admin client behind an [`OrderBacklog`], as a trait object: like the publisher's
/// producers (see `publisher::Producers`), so that a service sharing the backlog between
/// threads does not prove the client's deeply nested types `Send + Sync` itself.
trait Probe: Send + Sync {
    fn pending(&self) -> Pin<Box<dyn Future<Output = Result<u64>> + Send + '_>>;
    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

struct AdminProbe {
    /// Starting and stopping take it mutably; a question now and then (an operator's reload)
    /// does not need to run in parallel.
    admin: Mutex<DefaultMQAdminExt>,
    topic: String,
    consumer_group: String,
}

impl std::fmt::Debug for OrderBacklog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderBacklog").finish_non_exhaustive()
    }
}

/// The broker id of a master in a route.
const MASTER_ID: u64 = 0;

impl OrderBacklog {
    /// An admin client on `runtime`, under an admin group of its own.
    pub async fn start(runtime: &MqRuntime, settings: &MqSettings) -> Result<Self> {
        let group = format!("{}-backlog-probe", settings.producer_group);
        let mut admin = match settings.acl_hook() {
            Some(hook) => {
                DefaultMQAdminExt::with_admin_ext_group_and_rpc_hook(runtime.client(), group, hook)
            }
            None => DefaultMQAdminExt::with_admin_ext_group(runtime.client(), group),
        };
        admin.set_namesrv_addr(settings.name_server.as_str());
        MQAdminReadExt::start(&mut admin)
            .await
            .map_err(MqError::client("backlog probe start"))?;
        Ok(Self {
            probe: Box::new(AdminProbe {
                admin: Mutex::new(admin),
                topic: settings.topic.clone(),
                consumer_group: settings.consumer_group.clone(),
            }),
        })
    }

    /// Messages stored but not yet consumed by the order consumers, over the order topic
    /// and the group's retry topic (0 when every queue is consumed to its end).
    ///
    /// Each topic is named in the question, on every master broker of the order topic's
    /// route: asked for "the group's topics", a broker lists only those the group has
    /// committed an offset for, and a group that has committed nothing yet (consumers just
    /// started, or none running) would look drained with its whole queue ahead of it. A
    /// queue the group has never committed counts from its start.
    pub async fn pending(&self) -> Result<u64> {
        self.probe.pending().await
    }

    /// Call before [`MqRuntime::shutdown`].
    pub async fn shutdown(&self) {
        self.probe.shutdown().await;
    }
}

impl Probe for AdminProbe {
    fn pending(&self) -> Pin<Box<dyn Future<Output = Result<u64>> + Send + '_>> {
        Box::pin(self.pending_messages())
    }

    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async { MQAdminReadExt::shutdown(&mut *self.admin.lock().await).await })
    }
}

impl AdminProbe {
    async fn pending_messages(&self) -> Result<u64> {
        let admin = self.admin.lock().await;
        let route = admin
            .examine_topic_route_info(self.topic.as_str().into())
            .await
            .map_err(MqError::client("order topic route"))?
            .ok_or_else(|| MqError::NoRoute(self.topic.clone()))?;
        let retry_topic = format!("%RETRY%{}", self.consumer_group);
        let mut pending = 0;
        for broker in &route.broker_datas {
            let Some(master) = broker.broker_addrs().get(&MASTER_ID) else {
                continue;
            };
            for topic in [&self.topic, &retry_topic] {
                let stats = admin
                    .examine_consume_stats(
                        self.consumer_group.as_str().into(),
                        Some(topic.as_str().into()),
                        None,
                        Some(master.clone()),
                        None,
                    )
                    .await;
                let stats = match stats {
                    Ok(stats) => stats,
                    // No retry topic yet: nothing has ever been handed back.
                    Err(_) if topic == &retry_topic => continue,
                    Err(error) => return Err(MqError::client("consume stats")(error)),
                };
                pending += stats
                    .get_offset_table()
                    .values()
                    .map(|queue| {
                        let consumed = queue.get_consumer_offset().max(0);
                        u64::try_from(queue.get_broker_offset() - consumed).unwrap_or(0)
                    })
                    .sum::<u64>();
            }
        }
        Ok(pending)
    }
}
