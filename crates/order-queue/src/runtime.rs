//! The RocketMQ client's own Tokio runtime.
//!
//! The client never runs on the caller's runtime: it spawns its connections, pulls, heartbeats
//! and listener calls onto a runtime handed to it. [`MqRuntime`] owns that runtime and the
//! client runtime built on it. Shut it down with [`MqRuntime::shutdown`] after every producer
//! and consumer built on it — dropping a Tokio runtime inside an async context panics, so the
//! runtime is only ever released through `shutdown_background`, which is safe there.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rocketmq_client_rust::{ClientRuntime, ClientRuntimeConfig, TelemetryHandle};
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};
use tracing::{info, warn};

use crate::{MqError, Result};

pub struct MqRuntime {
    /// Owns the Tokio runtime; dropping it without shutdown only logs, never panics.
    owner: RuntimeOwner,
    /// What producers and consumers are built from; its pool holds the client instance.
    client: Arc<ClientRuntime>,
}

impl std::fmt::Debug for MqRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqRuntime")
            .field("thread_name", &self.owner.config().thread_name)
            .field("worker_threads", &self.owner.config().worker_threads)
            .field(
                "max_blocking_threads",
                &self.owner.config().max_blocking_threads,
            )
            .finish()
    }
}

impl MqRuntime {
    /// Builds the runtime. `name` prefixes its thread names. `blocking_parallelism` sizes the
    /// blocking pool that runs the synchronous listeners (local transactions, check-backs,
    /// consumed batches): with `p`, up to `2p` of them run at once and `8p` more may wait; a
    /// call beyond that is rejected at once (a local transaction then ends as `Unknown`, a
    /// batch is retried later). 16 is a reasonable start for a gateway replica.
    ///
    /// The async worker count is the machine's parallelism, not `blocking_parallelism`: the
    /// client's async work is small, and more workers than cores only add threads.
    pub fn new(name: &str, blocking_parallelism: usize) -> Result<Self> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut config = RuntimeConfig::for_parallelism(name, blocking_parallelism);
        config.worker_threads = cores.clamp(1, config.worker_threads.max(1));
        let owner = RuntimeOwner::plan(config)
            .map_err(|violation| MqError::Runtime(violation.to_string()))?
            .build()
            .map_err(|error| MqError::Runtime(error.to_string()))?;
        let client = ClientRuntime::try_new(
            owner.root_context().component("client"),
            ClientRuntimeConfig::default(),
            TelemetryHandle::noop(),
        )
        .map_err(|error| MqError::Runtime(error.to_string()))?;
        info!(name, blocking_parallelism, "RocketMQ client runtime built.");
        Ok(Self { owner, client })
    }

    /// The client runtime producers and consumers are built from.
    pub(crate) fn client(&self) -> Arc<ClientRuntime> {
        Arc::clone(&self.client)
    }

    /// Stops every client left on this runtime, joins its tasks (bounded by the client's and
    /// the runtime's shutdown timeouts, 30 s each by default) and releases the runtime in the
    /// background. Shut publishers and subscribers down first: this cuts off whatever they
    /// still have in flight. Unhealthy reports (tasks that had to be aborted) are logged.
    ///
    /// The future is boxed: the client's own shutdown nests deeply, and a caller awaiting it
    /// inline would compute its layout as part of its own, past the compiler's default
    /// recursion limit.
    pub fn shutdown(self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let Self { owner, client } = self;
            let report = client.shutdown().await;
            if !report.is_healthy() {
                warn!(report = %report.to_json(), "RocketMQ client runtime did not stop cleanly.");
            }
            drop(client);
            let report = owner.shutdown_tasks().await;
            if !report.is_healthy() {
                warn!(report = %report.to_json(), "RocketMQ runtime tasks did not stop cleanly.");
            }
            // Logs its own report when unhealthy.
            let _report = owner.shutdown_background();
            info!("RocketMQ client runtime shut down.");
        })
    }
}
