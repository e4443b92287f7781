//! Builds the consumer from its settings and runs it until told to stop.

use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use anyhow::Context;
use order_queue::{
    ConsumerTuning, DeadlinePublisher, DeadlineSubscriber, DeadlineTuning, MqRuntime, OrderBacklog,
    OrderSubscriber,
};
use order_store::Db;
use platform::ops::{self, OpsState};
use platform::runtime::SideRuntime;
use platform::shutdown::Shutdown;
use stock_cache::StockCache;

use crate::backlog::{self, OrdersPerMessage};
use crate::expirer::Expirer;
use crate::settings::Settings;
use crate::writer::OrderWriter;

/// The RocketMQ client's blocking pool, which runs the consumed batches. At most
/// `consumer.concurrency` consume threads hand it batches, so this leaves it room to spare:
/// a batch the full pool rejects is only retried later, a delay for nothing.
const MQ_BLOCKING_PARALLELISM: usize = 16;

/// Connections of the expirer: a deadline expires its orders one after another, a few
/// deadlines at once.
const EXPIRER_POOL: usize = 4;

pub struct Application {
    port: u16,
    ops_server: Server,
    ops_handle: ServerHandle,
    subscriber: OrderSubscriber,
    deadlines: DeadlinePublisher,
    /// `None` when `consumer.expire_orders` is off.
    expirer: Option<DeadlineSubscriber>,
    backlog: OrderBacklog,
    per_message: Arc<OrdersPerMessage>,
    backlog_every: Duration,
    mq_runtime: MqRuntime,
    /// Runs the batch writes; the client's listener threads block on it.
    writer_runtime: SideRuntime,
}

fn connect(settings: &Settings, pool_size: usize) -> anyhow::Result<(Db, StockCache)> {
    let cache = settings
        .redis
        .open(pool_size)
        .context("cannot set up Redis")?;
    let db = Db::connect(&settings.mysql.endpoint()?, pool_size).context("cannot set up MySQL")?;
    Ok((db, cache))
}

/// The deadline consumer: the orders of each deadline that falls due, still unpaid, expire.
async fn start_expirer(
    settings: &Settings,
    mq_runtime: &MqRuntime,
) -> anyhow::Result<DeadlineSubscriber> {
    let (expiry_db, expiry_cache) = connect(settings, EXPIRER_POOL)?;
    let expiring = Arc::new(Expirer::new(expiry_db, expiry_cache));
    DeadlineSubscriber::start(
        mq_runtime,
        &settings.rocketmq,
        DeadlineTuning::default(),
        move |deadline| {
            let expiring = expiring.clone();
            async move { expiring.expire(deadline).await }
        },
    )
    .await
    .context("cannot start the deadline consumer")
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        order_store::migrate(settings.mysql.endpoint()?)
            .await
            .context("cannot migrate MySQL")?;
        let consumer = &settings.consumer;
        let writer_runtime =
            SideRuntime::new("order-writer", 2).context("cannot start the writer runtime")?;
        let (db, cache) = connect(&settings, consumer.concurrency as usize + 2)?;
        let mq_runtime = MqRuntime::new("order-consumer", MQ_BLOCKING_PARALLELISM)
            .context("cannot start the MQ client")?;
        order_queue::ensure_topic(&mq_runtime, &settings.rocketmq)
            .await
            .context("cannot create the order topic")?;
        let deadlines = DeadlinePublisher::start(&mq_runtime, &settings.rocketmq)
            .await
            .context("cannot start the deadline producer")?;
        let per_message = Arc::new(OrdersPerMessage::default());
        let writer = Arc::new(
            OrderWriter::new(
                db,
                cache,
                consumer.batch_size as usize,
                writer_runtime.handle(),
                consumer.max_reconsume_times,
            )
            .with_payment_window(Duration::from_secs(settings.orders.payment_window_secs))
            .scheduling_deadlines(deadlines.clone())
            .counting_orders_per_message(per_message.clone()),
        );

        let tuning = ConsumerTuning {
            batch_size: consumer.batch_size,
            pull_batch_size: consumer.batch_size.max(32) * 2,
            consume_threads: consumer.concurrency,
            max_reconsume_times: consumer.max_reconsume_times,
            linger: Duration::from_millis(consumer.pull_linger_ms),
        };
        let subscriber = OrderSubscriber::start(&mq_runtime, &settings.rocketmq, tuning, writer)
            .await
            .context("cannot start the order consumer")?;

        let backlog = OrderBacklog::start(&mq_runtime, &settings.rocketmq)
            .await
            .context("cannot start the backlog probe")?;

        let expirer = if consumer.expire_orders {
            Some(start_expirer(&settings, &mq_runtime).await?)
        } else {
            tracing::info!(
                "Expirer off (consumer.expire_orders): this consumer sends its orders' \
                 deadlines and expires none."
            );
            None
        };

        let (probe_db, probe_cache) = connect(&settings, 2)?;
        let ready = ops::readiness(move || {
            let (db, cache) = (probe_db.clone(), probe_cache.clone());
            async move {
                cache.ping().await.map_err(|e| format!("Redis: {e}"))?;
                db.ping().await.map_err(|e| format!("MySQL: {e}"))
            }
        });
        let (port, ops_server, ops_handle) = ops::serve(
            &consumer.listen,
            OpsState {
                ready,
                metrics: ops::metrics_handle(),
            },
            |_| {},
        )
        .with_context(|| format!("cannot bind {}", consumer.listen))?;

        Ok(Self {
            port,
            ops_server,
            ops_handle,
            subscriber,
            deadlines,
            expirer,
            backlog,
            per_message,
            backlog_every: Duration::from_secs(consumer.backlog_export_secs.max(1)),
            mq_runtime,
            writer_runtime,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Consumes until `shutdown` fires; then stops pulling, lets the batches in hand finish
    /// (a batch cut short is redelivered, never lost) and closes the client.
    pub async fn run_until_stopped(self, shutdown: Shutdown) -> anyhow::Result<()> {
        let ops = tokio::spawn(self.ops_server);
        let backlog = tokio::spawn(backlog::export(
            self.backlog,
            self.per_message,
            self.backlog_every,
            shutdown.clone(),
        ));
        shutdown.cancelled().await;
        tracing::info!("Stopping: finishing the batches in hand.");
        self.subscriber.shutdown().await;
        if let Some(expirer) = self.expirer {
            expirer.shutdown().await;
        }
        self.deadlines.shutdown().await;
        let _ = backlog.await;
        self.mq_runtime.shutdown().await;
        self.ops_handle.stop(true).await;
        let _ = ops.await;
        drop(self.writer_runtime);
        tracing::info!("Order consumer stopped.");
        Ok(())
    }
}
