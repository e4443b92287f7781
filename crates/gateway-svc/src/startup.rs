//! Builds the gateway from its settings and runs it until told to stop.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{Server, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{App, HttpServer, middleware, web};
use anyhow::Context;
use domain::TokenSigner;
use order_queue::{BatchTuning, MqRuntime, OrderBacklog, OrderBatcher, OrderPublisher};
use order_store::Db;
use platform::ops::{self, OpsState};
use platform::runtime::SideRuntime;
use platform::shutdown::Shutdown;
use secrecy::ExposeSecret;
use stock_cache::{ReplicaWait, StockCache};

use crate::identity::IdentityConfig;
use crate::purchase::{ConfirmInRedis, PurchaseDesk};
use crate::rate_limit::RateLimits;
use crate::routes::{self, AppState, Audience};
use crate::sale_windows::SaleWindows;
use crate::settings::Settings;
use crate::sold_out::SoldOutFlags;
use crate::watch::OrderWatch;

/// Redis connections of the confirm runtime, which runs confirm.lua for the local
/// transactions and check-backs. Each connection carries many calls at once (redis-rs
/// multiplexes them), so a few serve every local transaction under way.
const CONFIRM_REDIS_POOL: usize = 16;

/// The RocketMQ client's blocking pool, where the local transactions run. It rejects rather
/// than queues when full (the transaction then ends as unknown, for the check-back), so it
/// is sized for the sends under way at once, not for the average.
const MQ_BLOCKING_PARALLELISM: usize = 64;

/// Connections the kernel holds for the server before it accepts them, and connections each
/// worker may be setting up at once. A sale's crowd connects in the same second: the burst
/// must wait to be accepted, not be refused by the kernel, so that every buyer is answered,
/// if only by a rate limit.
const ACCEPT_BACKLOG: u32 = 4096;
const MAX_CONNECTION_RATE: usize = 4096;

/// Redis and MySQL connections of the ops server (`gateway.ops_listen`), each.
const OPS_POOL: usize = 2;

/// A built gateway: bound, connected, not yet serving.
pub struct Application {
    port: u16,
    server: Server,
    /// With `gateway.ops_listen` set: its port, and the server of `/metrics` and `/admin`.
    ops_server: Option<(u16, Server)>,
    shared: SharedState,
    publisher: Arc<OrderPublisher>,
    mq_runtime: MqRuntime,
    /// Runs confirm.lua for the broker's callbacks, which arrive on the client's threads.
    confirm_runtime: SideRuntime,
    grace: Duration,
    /// Where order events are read from (`OrderWatch::follow`).
    events: stock_cache::EventSource,
}

fn token_signer(settings: &Settings) -> anyhow::Result<TokenSigner> {
    let keys = settings
        .tokens
        .keys
        .iter()
        .map(|(id, key)| (id.clone(), key.expose_secret().as_bytes().to_vec()))
        .collect();
    TokenSigner::new(settings.tokens.current_key_id.clone(), keys)
        .context("the purchase-token keys are invalid")
}

/// `redis.wait_replicas` and `redis.wait_timeout_ms` (0: `redis.timeout_ms`).
fn replica_wait(redis: &stock_cache::RedisSettings) -> Option<ReplicaWait> {
    let timeout_ms = match redis.wait_timeout_ms {
        0 => redis.timeout_ms,
        ms => ms,
    };
    ReplicaWait::new(redis.wait_replicas, Duration::from_millis(timeout_ms))
}

/// What the HTTP workers share, and the settings each opens its own connections with.
///
/// Each actix-web worker is a tokio runtime of its own, and a Redis or MySQL connection
/// belongs to the runtime that opened it. In a graceful stop, idle workers end first; a
/// connection one of them had opened, lent from a shared pool to a worker still finishing
/// its requests, failed those requests (503, "broken pipe"). So every worker has its own
/// pools, and its connections are driven by its own thread.
#[derive(Clone)]
struct SharedState {
    /// The main runtime's (the sold-out watcher); workers take pools of their own from it.
    cache: StockCache,
    /// Never called on the main runtime; workers take pools of their own from it.
    db: Db,
    redis_per_worker: usize,
    mysql_per_worker: usize,
    batcher: OrderBatcher,
    sold_out: Arc<SoldOutFlags>,
    sale_windows: Arc<SaleWindows>,
    signer: TokenSigner,
    limits: Arc<RateLimits>,
    token_ttl: Duration,
    backlog: Arc<OrderBacklog>,
    reload_drain: Duration,
    lease_holder: Arc<str>,
    watch: Arc<OrderWatch>,
    watch_recheck: Duration,
}

impl SharedState {
    /// Called on each worker's thread, when actix-web builds its app.
    fn for_this_worker(&self) -> AppState {
        self.with_pools(self.redis_per_worker, self.mysql_per_worker)
    }

    /// For the ops server's one worker: an operator's calls, a few at a time.
    fn for_operators(&self) -> AppState {
        self.with_pools(OPS_POOL, OPS_POOL)
    }

    fn with_pools(&self, redis: usize, mysql: usize) -> AppState {
        let cache = self.cache.with_own_pool(redis);
        AppState {
            desk: Arc::new(PurchaseDesk::new(
                cache.clone(),
                self.batcher.clone(),
                self.sold_out.clone(),
                self.limits.clone(),
                self.signer.clone(),
            )),
            cache,
            db: self.db.with_own_pool(mysql),
            signer: self.signer.clone(),
            limits: self.limits.clone(),
            sold_out: self.sold_out.clone(),
            sale_windows: self.sale_windows.clone(),
            token_ttl: self.token_ttl,
            backlog: self.backlog.clone(),
            reload_drain: self.reload_drain,
            lease_holder: self.lease_holder.clone(),
            watch: self.watch.clone(),
            watch_recheck: self.watch_recheck,
        }
    }
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        // The recorder first: a series recorded before it is installed is lost.
        ops::metrics_handle();
        let signer = token_signer(&settings)?;
        let redis = &settings.redis;
        let cache = redis
            .open(2)
            .context("cannot set up Redis")?
            .waiting_for_replicas(replica_wait(redis));
        let mysql = settings.mysql.endpoint().context("cannot set up MySQL")?;
        order_store::migrate(&mysql)
            .await
            .context("cannot migrate MySQL")?;
        let db = Db::connect(&mysql, settings.mysql.pool_size).context("cannot set up MySQL")?;

        let confirm_runtime =
            SideRuntime::new("confirm", 2).context("cannot start the confirm runtime")?;
        // Its own pool: connections live on the runtime that drives them.
        let confirm_cache = cache.with_own_pool(CONFIRM_REDIS_POOL);
        let confirm = Arc::new(ConfirmInRedis {
            cache: confirm_cache,
            runtime: confirm_runtime.handle(),
        });
        let mq_runtime = MqRuntime::new("gateway", MQ_BLOCKING_PARALLELISM)
            .context("cannot start the MQ client")?;
        order_queue::ensure_topic(&mq_runtime, &settings.rocketmq)
            .await
            .context("cannot create the order topic")?;
        let publisher = Arc::new(
            OrderPublisher::start(&mq_runtime, &settings.rocketmq, confirm)
                .await
                .context("cannot start the transactional producer")?,
        );
        let backlog = Arc::new(
            OrderBacklog::start(&mq_runtime, &settings.rocketmq)
                .await
                .context("cannot start the order backlog probe")?,
        );

        let workers = http_workers(settings.gateway.workers);
        let shared = SharedState {
            cache,
            db,
            redis_per_worker: redis.pool_size.div_ceil(workers),
            mysql_per_worker: settings.mysql.pool_size.div_ceil(workers),
            batcher: OrderBatcher::start(
                publisher.clone(),
                BatchTuning {
                    max_orders: settings.gateway.orders_per_message,
                    in_flight: settings.gateway.sends_in_flight,
                    patience: Duration::from_millis(settings.gateway.send_patience_ms),
                    linger: Duration::from_millis(settings.gateway.send_linger_ms),
                },
            ),
            sold_out: Arc::new(SoldOutFlags::default()),
            sale_windows: Arc::new(SaleWindows::new(Duration::from_millis(
                settings.gateway.sale_window_cache_ms,
            ))),
            signer,
            limits: Arc::new(RateLimits::new(&settings.rate_limit)),
            token_ttl: Duration::from_secs(settings.tokens.ttl_secs),
            backlog,
            reload_drain: Duration::from_secs(settings.gateway.reload_drain_secs),
            lease_holder: platform::instance::holder_id("gateway").into(),
            watch: OrderWatch::new(settings.orders.max_watchers),
            watch_recheck: Duration::from_secs(settings.orders.watch_recheck_secs.max(1)),
        };
        let events = shared.cache.event_source();
        let apps = AppParts {
            shared: shared.clone(),
            identity: web::Data::new(IdentityConfig::new(
                &settings.auth,
                settings.admin.token.clone(),
            )),
            openapi: web::Data::new(routes::docs::served(settings.auth.mode)),
            webhook_key: web::Data::new(domain::WebhookKey::new(
                settings.payments.webhook_secret.expose_secret().as_bytes(),
            )),
            header_cap: routes::HeaderCap(settings.gateway.max_header_bytes),
            max_body: settings.gateway.max_body_bytes,
        };
        let grace = Duration::from_secs(settings.gateway.shutdown_grace_secs);
        // actix-web takes a zero keep-alive for none.
        let keep_alive = Duration::from_secs(settings.gateway.keep_alive_secs);

        let (public, ops) = match &settings.gateway.ops_listen {
            None => (Audience::Everyone, None),
            Some(address) => (Audience::Public, Some(address)),
        };
        let listener = bind(&settings.gateway.listen)?;
        let port = listener.local_addr()?.port();
        let public_apps = apps.clone();
        let server = HttpServer::new(move || {
            let state = public_apps.for_this_worker();
            public_apps.clone().app(public, state)
        })
        .workers(workers)
        .keep_alive(keep_alive)
        .backlog(ACCEPT_BACKLOG)
        .max_connection_rate(MAX_CONNECTION_RATE)
        .shutdown_timeout(grace.as_secs())
        .disable_signals()
        .listen(listener)?
        .run();
        let ops_server = match ops {
            None => None,
            Some(address) => {
                let listener = bind(address)?;
                let ops_port = listener.local_addr()?.port();
                let server = HttpServer::new(move || {
                    let state = apps.for_operators();
                    apps.clone().app(Audience::Operators, state)
                })
                .workers(1)
                .keep_alive(keep_alive)
                .shutdown_timeout(grace.as_secs())
                .disable_signals()
                .listen(listener)?
                .run();
                Some((ops_port, server))
            }
        };

        Ok(Self {
            port,
            server,
            ops_server,
            shared,
            publisher,
            mq_runtime,
            confirm_runtime,
            grace,
            events,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port of `/metrics` and `/admin` when `gateway.ops_listen` is set.
    pub fn ops_port(&self) -> Option<u16> {
        self.ops_server.as_ref().map(|(port, _)| *port)
    }

    /// Serves until `shutdown` fires, then stops taking requests, lets in-flight ones
    /// finish (up to the grace period) and closes the producer.
    pub async fn run_until_stopped(self, shutdown: Shutdown) -> anyhow::Result<()> {
        let watchers = tokio::spawn(watch_sold_out_and_limits(
            self.shared.clone(),
            shutdown.clone(),
        ));
        let follower = tokio::spawn(self.shared.watch.clone().follow(
            self.events.subscribe(),
            self.shared.sold_out.clone(),
            shutdown.clone(),
        ));
        let mut handles = vec![self.server.handle()];
        let mut servers = vec![tokio::spawn(self.server)];
        if let Some((_, ops_server)) = self.ops_server {
            handles.push(ops_server.handle());
            servers.push(tokio::spawn(ops_server));
        }
        shutdown.cancelled().await;
        tracing::info!("Stopping: no new requests; finishing in-flight ones.");
        // Streams and long-polls would otherwise hold the stop open for the whole grace.
        self.shared.watch.close();
        let stops = futures::future::join_all(handles.iter().map(|handle| handle.stop(true)));
        if tokio::time::timeout(self.grace, stops).await.is_err() {
            tracing::warn!("In-flight requests did not finish within the grace period.");
        }
        for server in servers {
            let _ = server.await;
        }
        watchers.abort();
        follower.abort();
        self.publisher.shutdown().await;
        self.shared.backlog.shutdown().await;
        self.mq_runtime.shutdown().await;
        drop(self.confirm_runtime);
        tracing::info!("Gateway stopped.");
        Ok(())
    }
}

/// What every app of the gateway is built from, on each worker's thread.
#[derive(Clone)]
struct AppParts {
    shared: SharedState,
    identity: web::Data<IdentityConfig>,
    openapi: web::Data<crate::openapi::Document>,
    webhook_key: web::Data<domain::WebhookKey>,
    header_cap: routes::HeaderCap,
    max_body: usize,
}

impl AppParts {
    fn for_this_worker(&self) -> AppState {
        self.shared.for_this_worker()
    }

    fn for_operators(&self) -> AppState {
        self.shared.for_operators()
    }

    /// The endpoints of `audience`, over `state`. Takes the parts by value: the app they
    /// build outlives the factory call that builds it.
    fn app(
        self,
        audience: Audience,
        state: AppState,
    ) -> App<
        impl ServiceFactory<
            ServiceRequest,
            Config = (),
            Response = ServiceResponse<impl MessageBody>,
            Error = actix_web::Error,
            InitError = (),
        >,
    > {
        let state = web::Data::new(state);
        let ops_state = OpsState {
            ready: readiness(&state),
            metrics: ops::metrics_handle(),
        };
        let max_body = self.max_body;
        App::new()
            .wrap(middleware::from_fn(routes::cap_headers))
            // One span and the request series per request (the ops endpoints aside);
            // outermost, so that it sees the header cap's refusals too.
            .wrap(middleware::from_fn(platform::http::observe))
            .app_data(self.header_cap)
            .app_data(state)
            .app_data(self.identity)
            .app_data(self.openapi)
            .app_data(self.webhook_key)
            .configure(|cfg| {
                if audience.answers("/metrics") {
                    ops::configure(cfg, ops_state);
                } else {
                    ops::configure_probes(cfg, ops_state);
                }
            })
            .configure(|cfg| routes::configure(cfg, max_body, audience))
            .default_service(web::to(routes::not_found))
    }
}

fn bind(address: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(address).with_context(|| format!("cannot bind {address}"))
}

/// Ready while Redis answers. MySQL is not asked: the purchase never touches it, so a MySQL
/// blip must not take every gateway out of its Service at once (the order reads, cancels
/// and payments that need it answer 503 on their own meanwhile). The broker is not asked
/// either: a failed send releases the unit and answers 503, and a probe has no cheaper way
/// to ask than a send.
fn readiness(state: &web::Data<AppState>) -> ops::ReadinessCheck {
    let state = state.clone();
    ops::readiness(move || {
        let state = state.clone();
        async move { state.cache.ping().await.map_err(|e| format!("Redis: {e}")) }
    })
}

/// Once a second: clear sold-out flags whose product's epoch moved, and sample the
/// purchases under way. Every 30 s: forget idle buyers' rate-limit buckets.
async fn watch_sold_out_and_limits(state: SharedState, shutdown: Shutdown) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        ticks += 1;
        if ticks.is_multiple_of(30) {
            state.limits.forget_idle_buyers();
        }
        metrics::gauge!("seckill_purchases_in_flight")
            .set(state.limits.purchases_in_flight() as f64);
        let flagged: Vec<_> = state
            .sold_out
            .flagged()
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        if flagged.is_empty() {
            continue;
        }
        match state.cache.epochs(&flagged).await {
            Ok(epochs) => {
                for (product, epoch) in flagged.into_iter().zip(epochs) {
                    state.sold_out.observe(product, epoch);
                }
            }
            Err(error) => tracing::debug!(error = ?error, "Cannot read epochs; flags stay."),
        }
    }
}

/// The HTTP workers for `gateway.workers`: 0 is one per core the process may use, actix-web's
/// own default, made explicit here to share the pool sizes out among them.
fn http_workers(configured: usize) -> usize {
    match configured {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        workers => workers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_workers_is_one_per_core_and_any_other_number_is_taken_as_it_is() {
        let cores = std::thread::available_parallelism().unwrap().get();
        assert_eq!(http_workers(0), cores);
        assert_eq!(http_workers(1), 1);
        assert_eq!(http_workers(cores + 3), cores + 3);
    }
}
