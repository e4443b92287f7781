//! The Redis side of a sale: key names, the Lua scripts in `lua/`, and typed calls to them.
//!
//! Every key of one product shares the hash tag `{<prefix>:<product>}`, so each script
//! touches one slot and works on Redis Cluster. The scripts are the only writers of stock,
//! flows and tombstones; this crate only names keys, passes arguments and reads answers.
//!
//! - [`keys`]: the key layout.
//! - [`scripts`]: the embedded scripts (EVALSHA, loaded on NOSCRIPT).
//! - [`StockCache`]: the calls the services make.
//! - [`lifecycle`]: after the purchase, the order's status and the units of an order closed
//!   unpaid going back to the sale.
//! - [`events`]: the order events published on every status change, and their subscriber.

pub mod events;
pub mod keys;
pub mod lifecycle;
mod pool;
mod scripts;
pub mod settings;
mod topology;

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::Runtime;
use deadpool_redis::redis::{
    self, AsyncCommands, FromRedisValue, IntoConnectionInfo, ScriptInvocation,
};
use domain::{
    Closing, FlowRecord, FlowState, OrderStatus, OrderToken, PreDeductOutcome, ProductId, UserId,
};
use serde::Deserialize;

pub use events::{EventSource, OrderEvent};
pub use keys::ProductKeys;
pub use lifecycle::ReturnOutcome;
pub use settings::{RedisMode, RedisSettings};
pub use topology::Topology;

use crate::pool::{CallConnection, Manager, Pool, PoolError, SharedConnection};

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("the Redis key prefix `{0}` may not contain braces or be empty")]
    BadPrefix(String),
    #[error("cannot build the Redis pool: {0}")]
    Pool(String),
    #[error("no Redis connection")]
    Connection(#[from] PoolError),
    #[error("Redis failed")]
    Redis(#[from] redis::RedisError),
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    /// The call was sent and its answer did not come in time: it may have run, or may still
    /// run (its command waits in Redis's input while Redis is stalled). Only
    /// [`StockCache::pre_deduct`] tells this apart from [`CacheError::Timeout`].
    #[error("Redis did not answer a call sent to it within {0:?}; it may still run")]
    Unanswered(Duration),
    #[error("a script answered something it never returns: {0}")]
    UnexpectedReply(String),
    /// Redis has lost the product (no meta): no decision can be read from it until an
    /// operator reloads the product from MySQL.
    #[error("the product is not loaded in Redis")]
    NotLoaded,
    /// A pre-deduct reserved, but fewer replicas than asked acknowledged its write within the
    /// wait (see [`ReplicaWait`]): a failover now could lose the reservation and sell the
    /// unit again. The flow is there; the caller gives it back with [`StockCache::release`].
    #[error("{acknowledged} of {wanted} Redis replicas acknowledged the reservation in time")]
    NotReplicated { acknowledged: i64, wanted: u32 },
    /// A [`LoadMode::Define`] found reservations: a sale is running, and a new one would
    /// forget units reserved for orders still on their way. Nothing changed.
    #[error("the product has reservations; loading a new sale would forget them")]
    SaleRunning,
    /// A [`LoadMode::Rebuild`] or [`StockCache::forget_sale_state`] found the product loaded
    /// again: it is on sale, and rebuilding it would forget what it sold since. Nothing
    /// changed.
    #[error("the product is loaded in Redis again; rebuilding it would forget its sales")]
    AlreadyLoaded,
}

impl CacheError {
    /// Whether a pre-deduct reserved but its replicas did not acknowledge it in time
    /// ([`CacheError::NotReplicated`]): the caller must give the unit back.
    pub fn reserved_unreplicated(&self) -> bool {
        matches!(self, Self::NotReplicated { .. })
    }

    /// Whether the call may have run in Redis although its caller got no answer: it timed out
    /// after it was sent, or the connection was lost under it. Errors Redis answered, and
    /// calls that never got a connection, changed nothing.
    pub fn may_have_run(&self) -> bool {
        match self {
            Self::Unanswered(_) => true,
            Self::Redis(error) => {
                error.is_io_error() || error.is_connection_dropped() || error.is_timeout()
            }
            _ => false,
        }
    }
}

/// How many replicas must acknowledge a winning pre-deduct, and how long Redis's `WAIT`
/// may take for them.
///
/// `WAIT` counts the writes of the connection it is sent on, up to that point: sent on
/// the connection the script ran on, right after its answer, it covers the script's
/// writes — and, the connection being shared, any other caller's writes sent before it,
/// which only makes it wait for a little more. While it waits, Redis runs nothing else
/// sent on that connection, so every call of the worker waits behind it: with healthy
/// replicas a replication round trip, with a replica gone the whole timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaWait {
    pub replicas: u32,
    /// At least a millisecond: Redis takes `WAIT n 0` for "wait forever".
    pub timeout: Duration,
}

impl ReplicaWait {
    /// None for no replica; a zero timeout is taken as one millisecond.
    pub fn new(replicas: u32, timeout: Duration) -> Option<Self> {
        (replicas > 0).then(|| Self {
            replicas,
            timeout: timeout.max(Duration::from_millis(1)),
        })
    }
}

/// What `release.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The unit is back in stock and the token tombstoned.
    Released,
    /// There was no flow (already released, or never reserved); the token is tombstoned.
    NothingReserved,
    /// The flow is committed: an order will be written, so the unit stays sold.
    AlreadyCommitted,
}

/// When a product's sale is open, and which sale it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaleWindow {
    pub starts_at_ms: i64,
    /// 0: never ends.
    pub ends_at_ms: i64,
    /// The sale's generation: new on every fresh load of the product (a new sale), the same
    /// through restocks; 0 for a product loaded before sales had generations, or rebuilt
    /// after Redis lost it. Purchase tokens carry it (see [`StockCache::pre_deduct_in_sale`]).
    pub sale: u64,
}

/// A product as the sale scripts see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductMeta {
    pub initial_stock: i64,
    pub per_user_limit: u32,
    pub starts_at_ms: i64,
    pub ends_at_ms: i64,
    pub epoch: i64,
}

/// How `load_product.lua` loads a product. A running sale is never loaded over: its stock
/// only moves by [`StockCache::restock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadMode {
    /// A new sale, for tools that seed a product: flows, buyers, results and tombstones of
    /// any earlier sale are forgotten, unconditionally.
    Fresh,
    /// A new sale defined by an operator: as [`LoadMode::Fresh`], but refused
    /// ([`CacheError::SaleRunning`]) while any flow exists.
    Define,
    /// A product Redis lost, rebuilt from MySQL once its orders' flows are written back:
    /// they stay. Refused ([`CacheError::AlreadyLoaded`]) once the product has meta again.
    Rebuild,
}

impl LoadMode {
    fn as_arg(self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Define => "define",
            Self::Rebuild => "rebuild",
        }
    }

    /// The refusal of a load that answered -1.
    fn refusal(self) -> CacheError {
        match self {
            Self::Fresh => CacheError::UnexpectedReply("load_product fresh -1".into()),
            Self::Define => CacheError::SaleRunning,
            Self::Rebuild => CacheError::AlreadyLoaded,
        }
    }
}

/// What an operator sets on a running sale with [`StockCache::restock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaleTerms {
    /// Units the sale has in all, sold or not: the new initial stock.
    pub initial_stock: i64,
    pub per_user_limit: u32,
    pub starts_at_ms: i64,
    pub ends_at_ms: i64,
}

/// What `restock.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestockOutcome {
    /// Initial stock and stock both moved by `delta` (negative: units taken off sale);
    /// `stock` units are on sale now.
    Restocked { delta: i64, stock: i64 },
    /// Refused, nothing changed: `sold` units are reserved already, more than the new
    /// initial stock.
    BelowSold { sold: i64 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadSpec {
    pub initial_stock: i64,
    pub per_user_limit: u32,
    pub starts_at_ms: i64,
    pub ends_at_ms: i64,
    pub sellable_stock: i64,
    pub mode: LoadMode,
}

/// An order MySQL holds, as [`StockCache::restore_orders`] writes it back into Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredOrder {
    /// As MySQL holds it: a malformed token is written back too, for reconcile to report.
    pub order_token: String,
    pub user_id: UserId,
    pub quantity: u32,
    pub reserved_at_ms: i64,
}

/// An order MySQL holds and where it is in its lifecycle, as
/// [`StockCache::restore_order_states`] writes it back into Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderToRestore {
    pub order: RestoredOrder,
    /// `orders.status`.
    pub status: OrderStatus,
    /// `orders.pay_by` (unix ms), shown to the buyer while the order is confirmed.
    pub pay_by_ms: Option<i64>,
}

/// Why a token was tombstoned, and for whom when known.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Tombstone {
    pub user_id: Option<UserId>,
    pub quantity: Option<u32>,
    pub reason: String,
}

impl Tombstone {
    /// The closing whose return tombstoned the token (`lua/return_units.lua`), or None for
    /// a reservation given back before its order was written (released, rolled back): a
    /// failed purchase.
    pub fn closing(&self) -> Option<Closing> {
        match self.reason.as_str() {
            "cancelled" => Some(Closing::Cancelled),
            "expired" => Some(Closing::Expired),
            _ => None,
        }
    }

    /// The status of the order behind the tombstone: cancelled or expired when its units
    /// were returned, failed otherwise.
    pub fn status(&self) -> OrderStatus {
        self.closing()
            .map_or(OrderStatus::Failed, |closing| closing.status())
    }
}

/// Everything Redis knows about one order token, read in one round trip.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OrderView {
    /// The result says the order reached MySQL: `confirmed`, or a status only a written
    /// order reaches (paid, cancelled, expired).
    pub confirmed: bool,
    /// The order's status as the `result` hash has it; None when it has none (queued, a
    /// failed reservation, or a result written by a newer version that this one cannot
    /// read). A tombstone's own reason is in [`Tombstone::status`].
    pub status: Option<OrderStatus>,
    /// The payment deadline (unix ms), when the result is `confirmed` with one.
    pub pay_by_ms: Option<i64>,
    pub flow: Option<FlowRecord>,
    pub tombstone: Option<Tombstone>,
}

/// The services' handle on Redis: a connection shared by all its calls (see the `pool`
/// module), plus the key prefix. Clones share the connection.
#[derive(Clone)]
pub struct StockCache {
    connections: Arc<SharedConnection>,
    /// Kept for [`StockCache::with_own_pool`] and the event subscribers; it may carry a
    /// password, so it is never printed.
    topology: Topology,
    prefix: String,
    timeout: Duration,
    replica_wait: Option<ReplicaWait>,
}

impl std::fmt::Debug for StockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StockCache")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// How long a connection itself waits for an answer (see `pool::Manager`).
fn response_timeout(timeout: Duration) -> Duration {
    timeout.saturating_mul(2)
}

fn connections(
    topology: &Topology,
    size: usize,
    timeout: Duration,
) -> Result<Arc<SharedConnection>, CacheError> {
    Pool::builder(Manager {
        topology: topology.clone(),
        response_timeout: response_timeout(timeout),
    })
    .max_size(size)
    .runtime(Runtime::Tokio1)
    .build()
    .map(|pool: Pool| Arc::new(SharedConnection::new(pool)))
    .map_err(|e| CacheError::Pool(e.to_string()))
}

impl StockCache {
    /// A handle on the Redis at `url`, opening at most `pool_size` connections at once: one
    /// that every call shares, and others only while one retired by a failed call still
    /// serves the calls that were on it (see the `pool` module). For one over TLS, see
    /// [`RedisSettings::open`].
    pub fn new(
        url: &str,
        pool_size: usize,
        prefix: &str,
        timeout: Duration,
    ) -> Result<Self, CacheError> {
        let server = url
            .into_connection_info()
            .map_err(|e| CacheError::Pool(format!("the Redis URL: {e}")))?;
        Self::on(server, pool_size, prefix, timeout)
    }

    /// [`StockCache::new`] for a server or topology already described, its TLS included.
    pub fn on(
        topology: impl Into<Topology>,
        pool_size: usize,
        prefix: &str,
        timeout: Duration,
    ) -> Result<Self, CacheError> {
        if prefix.is_empty() || prefix.contains(['{', '}']) {
            return Err(CacheError::BadPrefix(prefix.to_owned()));
        }
        let topology = topology.into();
        Ok(Self {
            connections: connections(&topology, pool_size, timeout)?,
            topology,
            prefix: prefix.to_owned(),
            timeout,
            replica_wait: None,
        })
    }

    /// The same handle, whose winning pre-deducts wait for replicas (see [`ReplicaWait`]);
    /// `None`: they do not.
    pub fn waiting_for_replicas(self, replica_wait: Option<ReplicaWait>) -> Self {
        Self {
            replica_wait,
            ..self
        }
    }

    /// Another handle with the same settings and connections of its own, at most
    /// `pool_size` (at least one). A connection's I/O is driven by a task on the tokio
    /// runtime that opened it and fails ("broken pipe") once that runtime ends: a service
    /// whose runtimes end at different times (each actix-web worker is one) gives each
    /// runtime its own.
    pub fn with_own_pool(&self, pool_size: usize) -> Self {
        Self {
            connections: connections(&self.topology, pool_size.max(1), self.timeout)
                .expect("this topology built a pool before"),
            topology: self.topology.clone(),
            prefix: self.prefix.clone(),
            timeout: self.timeout,
            replica_wait: self.replica_wait,
        }
    }

    pub fn keys(&self, product: ProductId) -> ProductKeys {
        ProductKeys::new(&self.prefix, product)
    }

    /// Bounds every call: a stalled Redis must turn into a 503, not a hung request.
    async fn timed<T, F>(&self, call: F) -> Result<T, CacheError>
    where
        F: std::future::Future<Output = Result<T, CacheError>>,
    {
        timed_within(self.timeout, call).await
    }

    /// One script call, bounded like every call ([`Self::timed`]), on a lent connection.
    async fn run_script<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, CacheError> {
        self.timed(async {
            let mut conn = self.connection().await?;
            Ok(scripts::invoke(invocation, &mut conn).await?)
        })
        .await
    }

    /// `WAIT` on the connection a winning pre-deduct ran on, when replicas are asked for.
    async fn wait_for_replicas(&self, conn: &mut CallConnection) -> Result<(), CacheError> {
        let Some(wait) = self.replica_wait else {
            return Ok(());
        };
        let timeout_ms = u64::try_from(wait.timeout.as_millis()).unwrap_or(u64::MAX);
        let acknowledged: i64 = redis::cmd("WAIT")
            .arg(wait.replicas)
            .arg(timeout_ms)
            .query_async(conn)
            .await?;
        if acknowledged < i64::from(wait.replicas) {
            if self.topology.fails_over() {
                conn.retire();
            }
            return Err(CacheError::NotReplicated {
                acknowledged,
                wanted: wait.replicas,
            });
        }
        Ok(())
    }

    async fn connection(&self) -> Result<CallConnection, CacheError> {
        Ok(self.connections.lend().await?)
    }

    pub async fn ping(&self) -> Result<(), CacheError> {
        self.timed(async {
            let mut conn = self.connection().await?;
            let _: String = redis::cmd("PING").query_async(&mut conn).await?;
            Ok(())
        })
        .await
    }

    /// Runs `lua/pre_deduct.lua`: duplicate check, per-user limit, stock, flow record.
    ///
    /// A script sent but not answered within the timeout is [`CacheError::Unanswered`]: it
    /// may still reserve, so the caller gives its token back with [`StockCache::release`]
    /// (which tombstones a token that reserved nothing, so a late script cannot either).
    /// Timed out waiting for a connection, it was never sent: [`CacheError::Timeout`].
    ///
    /// No sale generation is checked: for tools and tests that reserve without a buyer's
    /// purchase token. A buyer's purchase goes through [`Self::pre_deduct_in_sale`].
    pub async fn pre_deduct(
        &self,
        token: &OrderToken,
        user: UserId,
        quantity: u32,
    ) -> Result<PreDeductOutcome, CacheError> {
        self.run_pre_deduct(token, user, quantity, None).await
    }

    /// [`Self::pre_deduct`] of a buyer whose purchase token was issued in sale generation
    /// `sale` ([`SaleWindow::sale`]): a token of an earlier sale of the product is
    /// [`PreDeductOutcome::SaleNotOpen`], that sale being over.
    pub async fn pre_deduct_in_sale(
        &self,
        token: &OrderToken,
        user: UserId,
        quantity: u32,
        sale: u64,
    ) -> Result<PreDeductOutcome, CacheError> {
        self.run_pre_deduct(token, user, quantity, Some(sale)).await
    }

    async fn run_pre_deduct(
        &self,
        token: &OrderToken,
        user: UserId,
        quantity: u32,
        sale: Option<u64>,
    ) -> Result<PreDeductOutcome, CacheError> {
        let keys = self.keys(token.product_id());
        let mut sent = false;
        let replicas = self
            .replica_wait
            .map_or(Duration::ZERO, |wait| wait.timeout);
        let outcome = timed_within(self.timeout + replicas, async {
            let mut conn = self.connection().await?;
            sent = true;
            let mut invocation = scripts::PRE_DEDUCT.key(&keys.sale_keys()[..]);
            invocation
                .arg(token.to_string())
                .arg(user.get())
                .arg(quantity);
            if let Some(sale) = sale {
                invocation.arg(sale);
            }
            let (code, stock): (i64, i64) = scripts::invoke(&invocation, &mut conn).await?;
            let outcome = PreDeductOutcome::from_script(code, stock)
                .ok_or_else(|| CacheError::UnexpectedReply(format!("pre_deduct {code}")))?;
            if matches!(outcome, PreDeductOutcome::Reserved { .. }) {
                self.wait_for_replicas(&mut conn).await?;
            }
            Ok(outcome)
        })
        .await;
        match outcome {
            Err(CacheError::Timeout(after)) if sent => Err(CacheError::Unanswered(after)),
            other => other,
        }
    }

    /// Runs `lua/confirm.lua` for one order: true = COMMIT (the flow is committed), false =
    /// ROLLBACK; [`CacheError::NotLoaded`] when Redis lost the product and cannot tell.
    pub async fn confirm(&self, token: &OrderToken) -> Result<bool, CacheError> {
        self.confirm_all(std::slice::from_ref(token)).await
    }

    /// Runs `lua/confirm.lua` for the orders of one message, all of one product: true =
    /// COMMIT (every flow is committed), false = ROLLBACK (some flow was gone: the others,
    /// unless already committed, are given back). One answer for all, as the message has.
    ///
    /// # Panics
    /// When `tokens` is empty or names more than one product (a message never does).
    pub async fn confirm_all(&self, tokens: &[OrderToken]) -> Result<bool, CacheError> {
        let product = one_product(tokens);
        let keys = self.keys(product);
        let mut invocation = scripts::CONFIRM.key(&keys.sale_keys()[..]);
        for token in tokens {
            invocation.arg(token.to_string());
        }
        match self.run_script::<i64>(&invocation).await? {
            1 => Ok(true),
            0 => Ok(false),
            -4 => Err(CacheError::NotLoaded),
            other => Err(CacheError::UnexpectedReply(other.to_string())),
        }
    }

    /// Runs `lua/release.lua`: gives the unit back unless the flow is committed.
    ///
    /// With replicas asked for ([`ReplicaWait`]) the release waits for them too, and one they
    /// did not acknowledge is [`CacheError::NotReplicated`]: in a failover the primary may
    /// take the release after its replica was promoted, which then still holds the unit, so
    /// the caller asks again (the next connection reaches the new primary).
    pub async fn release(
        &self,
        token: &OrderToken,
        reason: &str,
    ) -> Result<ReleaseOutcome, CacheError> {
        let keys = self.keys(token.product_id());
        let mut invocation = scripts::RELEASE.key(&keys.sale_keys()[..]);
        invocation.arg(token.to_string()).arg(reason);
        let replicas = self
            .replica_wait
            .map_or(Duration::ZERO, |wait| wait.timeout);
        let code: i64 = timed_within(self.timeout + replicas, async {
            let mut conn = self.connection().await?;
            let code = scripts::invoke(&invocation, &mut conn).await?;
            self.wait_for_replicas(&mut conn).await?;
            Ok(code)
        })
        .await?;
        match code {
            1 => Ok(ReleaseOutcome::Released),
            0 => Ok(ReleaseOutcome::NothingReserved),
            -1 => Ok(ReleaseOutcome::AlreadyCommitted),
            other => Err(CacheError::UnexpectedReply(format!("release {other}"))),
        }
    }

    /// Runs `lua/load_product.lua`; returns the product's new epoch, or the mode's refusal
    /// ([`CacheError::SaleRunning`], [`CacheError::AlreadyLoaded`]), which changed nothing.
    pub async fn load_product(
        &self,
        product: ProductId,
        spec: &LoadSpec,
    ) -> Result<i64, CacheError> {
        let keys = self.keys(product);
        let epoch: i64 = self
            .run_script(
                scripts::LOAD_PRODUCT
                    .key(&keys.meta)
                    .key(&keys.stock)
                    .key(&keys.flow)
                    .key(&keys.users)
                    .key(&keys.result)
                    .key(&keys.tomb)
                    .arg(spec.initial_stock)
                    .arg(spec.per_user_limit)
                    .arg(spec.starts_at_ms)
                    .arg(spec.ends_at_ms)
                    .arg(spec.sellable_stock)
                    .arg(spec.mode.as_arg()),
            )
            .await?;
        if epoch < 0 {
            return Err(spec.mode.refusal());
        }
        Ok(epoch)
    }

    /// Runs `lua/restock.lua`: the running sale's initial stock becomes
    /// `terms.initial_stock` and its stock moves by the same amount from what it is at that
    /// instant, with the other terms set alongside, in one step. Refused
    /// ([`RestockOutcome::BelowSold`]) when more units are reserved than the new initial
    /// stock; [`CacheError::NotLoaded`] when Redis lost the product.
    pub async fn restock(
        &self,
        product: ProductId,
        terms: &SaleTerms,
    ) -> Result<RestockOutcome, CacheError> {
        let keys = self.keys(product);
        let (code, a, b): (i64, i64, i64) = self
            .run_script(
                scripts::RESTOCK
                    .key(&keys.meta)
                    .key(&keys.stock)
                    .arg(terms.initial_stock)
                    .arg(terms.per_user_limit)
                    .arg(terms.starts_at_ms)
                    .arg(terms.ends_at_ms),
            )
            .await?;
        match code {
            1 => Ok(RestockOutcome::Restocked { delta: a, stock: b }),
            -7 => Ok(RestockOutcome::BelowSold { sold: a }),
            -4 => Err(CacheError::NotLoaded),
            other => Err(CacheError::UnexpectedReply(format!("restock {other}"))),
        }
    }

    /// Records that the orders are in MySQL, for status polling, without their payment
    /// deadline: [`Self::mark_confirmed_until`] with none, which keeps one already recorded
    /// and, like it, never overwrites a later status and publishes each change. For callers
    /// that do not know the deadline yet.
    pub async fn mark_confirmed(&self, tokens: &[OrderToken]) -> Result<(), CacheError> {
        self.mark_confirmed_with(tokens.iter().map(|token| (token, None)))
            .await?;
        Ok(())
    }

    /// The first step of rebuilding a product that Redis lost (see [`Self::restore_orders`]):
    /// forgets whatever is left of its flows, buyers and results (`lua/forget_sale.lua`).
    /// Tombstones stay: a token released or rolled back must never reserve again. Refused
    /// ([`CacheError::AlreadyLoaded`]) once the product has meta again: it is on sale, and
    /// its flows are live.
    pub async fn forget_sale_state(&self, product: ProductId) -> Result<(), CacheError> {
        let keys = self.keys(product);
        let forgotten: i64 = self
            .run_script(
                scripts::FORGET_SALE
                    .key(&keys.meta)
                    .key(&keys.flow)
                    .key(&keys.users)
                    .key(&keys.result),
            )
            .await?;
        match forgotten {
            1 => Ok(()),
            _ => Err(CacheError::AlreadyLoaded),
        }
    }

    /// [`Self::restore_order_states`] of orders that are all confirmed, with no known
    /// deadline: what a reload wrote back before orders could end. A reload that may meet
    /// paid, cancelled or expired orders must pass their status instead: this would hold
    /// the units of a cancelled order again.
    pub async fn restore_orders(
        &self,
        product: ProductId,
        orders: &[RestoredOrder],
    ) -> Result<(), CacheError> {
        let orders: Vec<_> = orders
            .iter()
            .map(|order| OrderToRestore {
                order: order.clone(),
                status: OrderStatus::Confirmed,
                pay_by_ms: None,
            })
            .collect();
        self.restore_order_states(product, &orders).await
    }

    /// Writes back, for orders MySQL holds, what the purchase path and the lifecycle had
    /// written for them, so that Redis reads as if it had never lost them:
    /// - an open (confirmed) or paid order holds its units: a committed flow (so the token
    ///   can never reserve again and reconcile finds its order), the buyer's units (the
    ///   per-user limit), and its result, `confirmed [<pay_by>]` or `paid`;
    /// - a cancelled or expired order holds none: no flow and no units (MySQL's stock
    ///   already counts them back), a tombstone of its return (the token can never reserve
    ///   again, and returning it again answers [`ReturnOutcome::AlreadyReturned`]) and its
    ///   result;
    /// - a `failed` one (never written by the purchase path, but MySQL's word): a tombstone
    ///   and its result, no units.
    ///
    /// Stock and meta come last, from [`Self::load_product`]: until then the product stays
    /// "not loaded" and nobody buys against a half-rebuilt state. Nothing is published:
    /// nobody's order changed.
    pub async fn restore_order_states(
        &self,
        product: ProductId,
        orders: &[OrderToRestore],
    ) -> Result<(), CacheError> {
        if orders.is_empty() {
            return Ok(());
        }
        let keys = self.keys(product);
        self.timed(async {
            let mut conn = self.connection().await?;
            let mut pipe = redis::pipe();
            for OrderToRestore {
                order,
                status,
                pay_by_ms,
            } in orders
            {
                let token = &order.order_token;
                match status {
                    OrderStatus::Queued | OrderStatus::Confirmed | OrderStatus::Paid => {
                        // The record pre_deduct.lua would have written; the stock at the time
                        // is not known, and nothing reads it back.
                        let flow = FlowRecord {
                            user_id: order.user_id,
                            quantity: order.quantity,
                            stock_before: 0,
                            stock_after: 0,
                            reserved_at_ms: order.reserved_at_ms,
                            state: FlowState::Committed,
                        };
                        let flow =
                            serde_json::to_string(&flow).expect("a flow record always serialises");
                        pipe.hset(&keys.flow, token, flow)
                            .ignore()
                            .hincr(&keys.users, order.user_id.get(), order.quantity)
                            .ignore();
                    }
                    OrderStatus::Cancelled | OrderStatus::Expired | OrderStatus::Failed => {
                        // The tombstone give_back.lua writes, the status as its reason.
                        let tomb = format!(
                            r#"{{"user_id":{},"quantity":{},"reason":"{}"}}"#,
                            order.user_id.get(),
                            order.quantity,
                            status.as_str()
                        );
                        pipe.hset(&keys.tomb, token, tomb).ignore();
                    }
                }
                pipe.hset(
                    &keys.result,
                    token,
                    lifecycle::result_value(*status, *pay_by_ms),
                )
                .ignore();
            }
            let () = pipe.query_async(&mut conn).await?;
            Ok(())
        })
        .await
    }

    /// Result, flow and tombstone of one token, in one round trip.
    pub async fn order_view(&self, token: &OrderToken) -> Result<OrderView, CacheError> {
        let keys = self.keys(token.product_id());
        let field = token.to_string();
        self.timed(async {
            let mut conn = self.connection().await?;
            let (result, flow, tomb): (Option<String>, Option<String>, Option<String>) =
                redis::pipe()
                    .hget(&keys.result, &field)
                    .hget(&keys.flow, &field)
                    .hget(&keys.tomb, &field)
                    .query_async(&mut conn)
                    .await?;
            let parse_flow = |json: String| {
                FlowRecord::from_json(&json)
                    .map_err(|e| CacheError::UnexpectedReply(format!("flow record: {e}")))
            };
            let (status, pay_by_ms) = result
                .as_deref()
                .map_or((None, None), lifecycle::parse_result);
            Ok(OrderView {
                confirmed: matches!(
                    status,
                    Some(
                        OrderStatus::Confirmed
                            | OrderStatus::Paid
                            | OrderStatus::Cancelled
                            | OrderStatus::Expired
                    )
                ),
                status,
                pay_by_ms,
                flow: flow.map(parse_flow).transpose()?,
                tombstone: tomb.and_then(|json| serde_json::from_str(&json).ok()),
            })
        })
        .await
    }

    /// The product's meta, or None when Redis does not have it loaded.
    pub async fn meta(&self, product: ProductId) -> Result<Option<ProductMeta>, CacheError> {
        let keys = self.keys(product);
        self.timed(async {
            let mut conn = self.connection().await?;
            let fields: Vec<Option<i64>> = redis::cmd("HMGET")
                .arg(&keys.meta)
                .arg(&[
                    "initial_stock",
                    "per_user_limit",
                    "starts_at_ms",
                    "ends_at_ms",
                    "epoch",
                ])
                .query_async(&mut conn)
                .await?;
            let [Some(initial_stock), Some(limit), starts, ends, epoch] = fields[..] else {
                return Ok(None);
            };
            Ok(Some(ProductMeta {
                initial_stock,
                per_user_limit: u32::try_from(limit).unwrap_or(0),
                starts_at_ms: starts.unwrap_or(0),
                ends_at_ms: ends.unwrap_or(0),
                epoch: epoch.unwrap_or(0),
            }))
        })
        .await
    }

    /// What issuing a purchase token reads of a product, in one round trip: its sale window
    /// and the generation of its sale; None when Redis does not have it loaded.
    pub async fn sale_window(&self, product: ProductId) -> Result<Option<SaleWindow>, CacheError> {
        let keys = self.keys(product);
        self.timed(async {
            let mut conn = self.connection().await?;
            let fields: Vec<Option<i64>> = redis::cmd("HMGET")
                .arg(&keys.meta)
                .arg(&["per_user_limit", "starts_at_ms", "ends_at_ms", "sale"])
                .query_async(&mut conn)
                .await?;
            // Loaded means per_user_limit is there, as for pre_deduct.lua.
            let [Some(_), starts, ends, sale] = fields[..] else {
                return Ok(None);
            };
            Ok(Some(SaleWindow {
                starts_at_ms: starts.unwrap_or(0),
                ends_at_ms: ends.unwrap_or(0),
                sale: sale.and_then(|sale| u64::try_from(sale).ok()).unwrap_or(0),
            }))
        })
        .await
    }

    /// The epochs of several products (None where not loaded), asked at once: on the shared
    /// connection the reads leave in one write. Not a pipeline, which a cluster refuses when
    /// the products' slots differ.
    pub async fn epochs(&self, products: &[ProductId]) -> Result<Vec<Option<i64>>, CacheError> {
        self.timed(async {
            let reads = products.iter().map(|product| async move {
                let mut conn = self.connection().await?;
                let epoch: Option<i64> = conn.hget(self.keys(*product).meta, "epoch").await?;
                Ok::<_, CacheError>(epoch)
            });
            futures::future::try_join_all(reads).await
        })
        .await
    }

    /// Stock left in Redis, or None when not loaded.
    pub async fn stock(&self, product: ProductId) -> Result<Option<i64>, CacheError> {
        let keys = self.keys(product);
        self.timed(async {
            let mut conn = self.connection().await?;
            Ok(conn.get(&keys.stock).await?)
        })
        .await
    }

    /// The units each buyer holds of the product, as the per-user limit counts them, keyed
    /// by the user id as Redis holds it (an audit reports one that is not a number).
    pub async fn units_by_buyer(
        &self,
        product: ProductId,
    ) -> Result<std::collections::BTreeMap<String, i64>, CacheError> {
        let keys = self.keys(product);
        self.timed(async {
            let mut conn = self.connection().await?;
            Ok(conn.hgetall(&keys.users).await?)
        })
        .await
    }

    /// How many flow records the product holds.
    pub async fn flow_count(&self, product: ProductId) -> Result<u64, CacheError> {
        let keys = self.keys(product);
        self.timed(async {
            let mut conn = self.connection().await?;
            Ok(conn.hlen(&keys.flow).await?)
        })
        .await
    }

    /// Which of these tokens have a flow, in one round trip. Text, as MySQL's orders hold
    /// them: a malformed one is answered (it has no flow) rather than refused.
    pub async fn flows_exist(
        &self,
        product: ProductId,
        tokens: &[String],
    ) -> Result<Vec<bool>, CacheError> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let keys = self.keys(product);
        self.timed(async {
            let mut conn = self.connection().await?;
            let mut pipe = redis::pipe();
            for token in tokens {
                pipe.hexists(&keys.flow, token);
            }
            Ok(pipe.query_async(&mut conn).await?)
        })
        .await
    }

    /// One HSCAN step over the product's flows; cursor 0 starts and, returned, ends a scan.
    /// Records that do not parse are returned as errors beside the good ones, so that a
    /// single bad record cannot hide the rest from an audit.
    pub async fn scan_flows(
        &self,
        product: ProductId,
        cursor: u64,
        count: usize,
    ) -> Result<FlowPage, CacheError> {
        let keys = self.keys(product);
        self.timed(async {
            let mut conn = self.connection().await?;
            let (next, pairs): (u64, Vec<(String, String)>) = redis::cmd("HSCAN")
                .arg(&keys.flow)
                .arg(cursor)
                .arg("COUNT")
                .arg(count)
                .query_async(&mut conn)
                .await?;
            let mut page = FlowPage {
                next_cursor: next,
                ..FlowPage::default()
            };
            for (token, json) in pairs {
                match (token.parse::<OrderToken>(), FlowRecord::from_json(&json)) {
                    (Ok(token), Ok(flow)) => page.flows.push((token, flow)),
                    _ => page.unreadable.push(token),
                }
            }
            Ok(page)
        })
        .await
    }
}

/// Bounds a call: a stalled Redis must turn into a 503, not a hung request.
async fn timed_within<T, F>(limit: Duration, call: F) -> Result<T, CacheError>
where
    F: std::future::Future<Output = Result<T, CacheError>>,
{
    tokio::time::timeout(limit, call)
        .await
        .map_err(|_| CacheError::Timeout(limit))?
}

/// One step of a flow scan.
#[derive(Debug, Default)]
pub struct FlowPage {
    pub next_cursor: u64,
    pub flows: Vec<(OrderToken, FlowRecord)>,
    pub unreadable: Vec<String>,
}

/// The one product a message's orders belong to: a script runs in one product's slot.
fn one_product(tokens: &[OrderToken]) -> ProductId {
    let product = tokens
        .first()
        .expect("a message holds at least one order")
        .product_id();
    assert!(
        tokens.iter().all(|token| token.product_id() == product),
        "the orders of one message are of one product"
    );
    product
}
