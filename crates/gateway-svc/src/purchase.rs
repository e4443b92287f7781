//! The purchase path, in the order DESIGN.md gives it and for the reasons it gives:
//! the Lua pre-deduct first (the crowd stops there), then — winners only — the
//! transactional message, whose local transaction is `confirm.lua`. Winners of one product
//! that arrive while the broker is busy share a message ([`OrderBatcher`]): its local
//! transaction confirms all of their flows or none.
//!
//! Two promises shape the rest. **A 503 is no order**: before a purchase is refused after
//! its pre-deduct, its token goes through `release.lua` — the unit goes back, or a token
//! that reserved nothing is tombstoned — because a flow left reserved is turned into an
//! order later (a check-back commits it, or reconcile re-publishes it). That covers a
//! failed send, a message rolled back (by confirm.lua, or by the client without running
//! it when the broker answers a flush or replica timeout), a local transaction with no
//! answer, and a pre-deduct Redis did not answer (its script may still run once Redis
//! catches up). `release.lua` refuses a committed flow: that purchase is answered 202.
//! **A 202 is an order**: it is given on the broker's COMMIT, or on a flow the gateway
//! committed itself, whose order it then sends as a plain message rather than leave it to
//! a check-back that, seconds or minutes later, decides from a Redis that may have lost
//! the flow by then.
//!
//! Spans (children of the purchase's): `lua.pre_deduct`, `mq.send_half` and, inside it, the
//! `local_transaction` (run by the client on its own thread, attached through
//! [`SendSpans`]) with its `lua.confirm`; `lua.release` after a failed send. The `lua.*`
//! and `mq.send_half` spans only while spans are exported. A broker
//! check-back arrives with nothing but the order token: it starts a trace of its own that
//! names the token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use domain::{OrderPlaced, OrderToken, PreDeductOutcome, PurchaseClaims};
use order_queue::{LocalTransaction, OrderBatcher, TxDecision};
use platform::telemetry::{ORDER_TOKEN_ATTRIBUTE, annotate};
use stock_cache::{ReleaseOutcome, StockCache};
use tokio::runtime::Handle;
use tracing::Instrument;

use crate::error::ApiError;
use crate::sold_out::SoldOutFlags;

/// How often, and how far apart, a purchase whose outcome Redis left open (a local
/// transaction with no answer, a pre-deduct with no answer) asks Redis again before
/// answering: long enough to ride out a Redis restart or failover.
const REDIS_RETRIES: u32 = 5;
const REDIS_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// How long a refused purchase's release goes on in the background once Redis has answered
/// none of the [`REDIS_RETRIES`]: well past reconcile's grace window (120 s by default),
/// before which nothing else touches a reserved flow that has no message.
const WITHDRAW_PATIENCE: std::time::Duration = std::time::Duration::from_secs(600);
/// The longest pause between two background releases.
const WITHDRAW_PAUSE_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Attempts at the plain message of an order whose flow the gateway committed itself.
const PLAIN_SEND_ATTEMPTS: u32 = 2;

pub struct PurchaseDesk {
    cache: StockCache,
    sender: OrderBatcher,
    sold_out: Arc<SoldOutFlags>,
    send_spans: Arc<SendSpans>,
}

fn outcome(label: &'static str) {
    metrics::counter!("seckill_purchases_total", "outcome" => label).increment(1);
}

fn lua_seconds(script: &'static str, started: Instant) {
    metrics::histogram!("seckill_lua_seconds", "script" => script)
        .record(started.elapsed().as_secs_f64());
}

/// A span for one Lua script call (`lua.<script>`), a Redis client call in the trace; none
/// while spans are not exported. Nothing is logged inside one, and `seckill_lua_seconds`
/// times every call: without an exporter the span would be work no one sees, on every
/// purchase the crowd makes (pre_deduct's was a third of the spans of a purchase refused
/// DUPLICATE).
fn lua_span(script: &'static str) -> tracing::Span {
    if !platform::telemetry::exporting() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        "lua",
        otel.name = %format_args!("lua.{script}"),
        otel.kind = "client",
        db.system.name = "redis",
        script,
    )
}

/// The `mq.send_half` span of one order's transactional send; none while spans are not
/// exported, like [`lua_span`]: `seckill_send_seconds` times every send, and the span was
/// the last one a winner made beside its purchase's.
fn send_span(token: &OrderToken) -> tracing::Span {
    if !platform::telemetry::exporting() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        "mq.send_half",
        otel.kind = "producer",
        messaging.system = "rocketmq",
        order = %token.short(),
        decision = tracing::field::Empty,
    )
}

/// The span each order in flight was sent under (its `mq.send_half`, or its purchase's while
/// spans are not exported). The client runs the local transaction on a thread of its own,
/// with nothing but the order; this is how it finds the span to record itself under, so the
/// purchase's trace shows it.
#[derive(Default)]
pub struct SendSpans(Mutex<HashMap<OrderToken, tracing::Span>>);

impl SendSpans {
    fn insert(&self, token: &OrderToken, span: tracing::Span) {
        self.lock().insert(token.clone(), span);
    }

    fn remove(&self, token: &OrderToken) {
        self.lock().remove(token);
    }

    fn get(&self, token: &OrderToken) -> Option<tracing::Span> {
        self.lock().get(token).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<OrderToken, tracing::Span>> {
        // A panic while holding the lock leaves a map of spans: still usable.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl PurchaseDesk {
    pub fn new(
        cache: StockCache,
        sender: OrderBatcher,
        sold_out: Arc<SoldOutFlags>,
        send_spans: Arc<SendSpans>,
    ) -> Self {
        Self {
            cache,
            sender,
            sold_out,
            send_spans,
        }
    }

    /// Takes a verified purchase through pre-deduct and, if it wins, the message.
    /// Ok means the order is queued: its message is committed, or its flow is committed and
    /// the order sent plainly (or, that failing, left to the check-back and reconcile).
    /// An error after the pre-deduct means nothing is reserved for the token any more, or
    /// is being given back (see the module docs).
    pub async fn purchase(&self, claims: &PurchaseClaims, quantity: u32) -> Result<(), ApiError> {
        let product = claims.product_id();
        if self.sold_out.is_sold_out(product) {
            outcome("sold_out");
            return Err(ApiError::SoldOut);
        }

        let started = Instant::now();
        let reserved = self
            .cache
            .pre_deduct_in_sale(&claims.order_token, claims.user_id, quantity, claims.sale)
            .instrument(lua_span("pre_deduct"))
            .await;
        lua_seconds("pre_deduct", started);
        let reserved_at_ms = chrono::Utc::now().timestamp_millis();
        let reserved = match reserved {
            Ok(reserved) => reserved,
            Err(error) if error.may_have_run() || error.reserved_unreplicated() => {
                return self.withdraw_reservation(claims, quantity, error).await;
            }
            Err(error) => return Err(ApiError::unavailable("Redis cannot be reached", error)),
        };
        match reserved {
            PreDeductOutcome::Reserved { stock_after } => {
                platform::ops::record_stock(product.get(), "redis", stock_after);
                if stock_after == 0 {
                    self.sold_out.mark(product);
                }
            }
            PreDeductOutcome::SoldOut { stock_left } => {
                platform::ops::record_stock(product.get(), "redis", stock_left);
                if stock_left == 0 {
                    self.sold_out.mark(product);
                }
                outcome("sold_out");
                return Err(ApiError::SoldOut);
            }
            PreDeductOutcome::Duplicate => {
                outcome("duplicate");
                return Err(ApiError::Duplicate);
            }
            PreDeductOutcome::LimitExceeded => {
                outcome("limit_exceeded");
                return Err(ApiError::LimitExceeded);
            }
            PreDeductOutcome::SaleNotOpen => {
                outcome("sale_not_open");
                return Err(ApiError::SaleNotOpen);
            }
            PreDeductOutcome::QuantityAboveLimit => {
                outcome("bad_request");
                return Err(ApiError::BadRequest(
                    "quantity is above the per-user limit".into(),
                ));
            }
            PreDeductOutcome::NotLoaded => {
                outcome("not_loaded");
                return Err(ApiError::Unavailable {
                    message: "the product is not loaded for sale",
                    cause: None,
                });
            }
        }

        // Crash point 1: the unit is reserved in Redis and no message exists; reconcile
        // finds the flow once its grace window has passed.
        platform::crash_point!("gateway::after_pre_deduct");

        let send_span = send_span(&claims.order_token);
        // What the message and the local transaction hang under (the consumer joins the
        // trace there: the message is its cause): the send's span, or the purchase's while
        // the send has none, so their log lines still carry the purchase's trace id.
        let cause = if send_span.is_none() {
            tracing::Span::current()
        } else {
            send_span.clone()
        };
        let order = OrderPlaced::new(
            claims.order_token.clone(),
            claims.user_id,
            quantity,
            reserved_at_ms,
        )
        .with_traceparent(platform::telemetry::traceparent_of(&cause));
        self.send_spans.insert(&order.order_token, cause);
        let started = Instant::now();
        let sent = self
            .sender
            .send(order.clone())
            .instrument(send_span.clone())
            .await;
        self.send_spans.remove(&order.order_token);
        metrics::histogram!("seckill_send_seconds").record(started.elapsed().as_secs_f64());
        match &sent {
            Ok(decision) => send_span.record("decision", answer(*decision)),
            Err(_) => send_span.record("decision", "send_failed"),
        };
        drop(send_span);
        match sent {
            Ok(TxDecision::Commit) => {
                outcome("accepted");
                Ok(())
            }
            // The half message is stored, but the local transaction gave no answer: ask
            // again here before telling the buyer anything.
            Ok(TxDecision::Unknown) => self.settle_unknown(&order).await,
            Ok(TxDecision::Rollback) => self.settle_rollback(&order).await,
            Err(send_error) => self.release_after_failed_send(&order, send_error).await,
        }
    }

    /// The local transaction gave no answer (Redis did not answer confirm.lua, or the
    /// client's pool had no thread for it); the half message is stored and waits for the
    /// broker's check-back. A 202 is only given once confirm.lua has committed the flow, and
    /// then the order also leaves as a plain message ([`Self::deliver_committed`]): the
    /// check-back may come minutes later and finds no flow if Redis lost it meanwhile (an
    /// operator's reload rebuilds only the flows of orders MySQL holds), which would roll
    /// the message back under a buyer told 202. Redis answering "no flow" has tombstoned the
    /// token, or has lost the product (a reload then rebuilds no flow for it): 503, and the
    /// check-back rolls back. Redis not answering at all: the token is given back first.
    async fn settle_unknown(&self, order: &OrderPlaced) -> Result<(), ApiError> {
        let token = &order.order_token;
        for attempt in 0..REDIS_RETRIES {
            if attempt > 0 {
                tokio::time::sleep(REDIS_RETRY_PAUSE).await;
            }
            let started = Instant::now();
            let confirmed = self
                .cache
                .confirm(token)
                .instrument(lua_span("confirm"))
                .await;
            lua_seconds("confirm", started);
            match confirmed {
                Ok(true) => return self.deliver_committed(order).await,
                Ok(false) | Err(stock_cache::CacheError::NotLoaded) => {
                    return Err(unconfirmed());
                }
                Err(error) => {
                    tracing::warn!(order = %token.short(), attempt, error = ?error, "confirm.lua failed after an unanswered local transaction.");
                }
            }
        }
        match self.withdraw(token, "unconfirmed").await {
            Withdrawal::Committed => self.deliver_committed(order).await,
            Withdrawal::Withdrawn | Withdrawal::Pending => Err(unconfirmed()),
        }
    }

    /// The broker was told ROLLBACK and discards the half message. Either confirm.lua
    /// decided it (a flow of the message was gone; it gave the reserved ones back), or the
    /// client did without running the local transaction: it does so when the broker stored
    /// the half message but answered FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT or
    /// SLAVE_NOT_AVAILABLE, and then the flow is still reserved — reconcile would turn it
    /// into an order for a buyer told 503. So the token is given back before the answer; a
    /// flow committed on its own (reconcile, or this gateway after an unanswered local
    /// transaction) has its order on the way, and is answered 202.
    async fn settle_rollback(&self, order: &OrderPlaced) -> Result<(), ApiError> {
        match self.withdraw(&order.order_token, "rolled_back").await {
            Withdrawal::Committed => self.deliver_committed(order).await,
            Withdrawal::Withdrawn | Withdrawal::Pending => {
                outcome("rolled_back");
                Err(ApiError::Unavailable {
                    message: "the order could not be confirmed",
                    cause: None,
                })
            }
        }
    }

    /// The order of a flow that is committed, sent as a plain message before the 202 (see
    /// [`Self::settle_unknown`]). The consumer writes an order once, whatever number of
    /// messages carry it, so the half message committed later by its check-back is harmless.
    /// Should the plain send fail too, the purchase is still answered 202: release.lua
    /// refuses a committed flow, so the check-back commits the half message, or reconcile
    /// re-publishes the order — unless Redis loses the flow first (see the README's
    /// failure modes).
    async fn deliver_committed(&self, order: &OrderPlaced) -> Result<(), ApiError> {
        for attempt in 0..PLAIN_SEND_ATTEMPTS {
            match self.sender.publish(order).await {
                Ok(()) => {
                    metrics::counter!("seckill_orders_sent_plain_total", "outcome" => "stored")
                        .increment(1);
                    outcome("accepted");
                    return Ok(());
                }
                Err(error) => {
                    tracing::warn!(order = %order.order_token.short(), attempt, error = %error, "The plain message of a committed order was not stored.");
                }
            }
        }
        metrics::counter!("seckill_orders_sent_plain_total", "outcome" => "failed").increment(1);
        tracing::warn!(order = %order.order_token.short(), "A committed order goes to the check-back or reconcile: its plain message was not stored.");
        outcome("accepted");
        Ok(())
    }

    /// A pre-deduct that may hold a unit the purchase cannot keep. Redis did not answer it,
    /// but may have run it, or may still: while Redis is stalled the script waits in its
    /// input and reserves once Redis catches up. Or it reserved, and fewer replicas than
    /// `redis.wait_replicas` acknowledged it in time: a failover now would lose the
    /// reservation and sell the unit again. Told 503, the buyer must not get that unit
    /// (reconcile would otherwise turn the lone flow into an order), so the token is given
    /// back first: `release.lua` returns a unit that was reserved, and tombstones a token
    /// that reserved nothing, which a late pre-deduct then refuses. Either order of the two
    /// scripts ends with nothing reserved.
    async fn withdraw_reservation(
        &self,
        claims: &PurchaseClaims,
        quantity: u32,
        error: stock_cache::CacheError,
    ) -> Result<(), ApiError> {
        let token = &claims.order_token;
        let reason = if error.reserved_unreplicated() {
            "not_replicated"
        } else {
            "pre_deduct_unanswered"
        };
        match self.withdraw(token, reason).await {
            // Only confirm.lua commits a flow, and no message was sent for this one: a
            // reconcile run would have to have confirmed it. Its order is on the way.
            Withdrawal::Committed => {
                tracing::warn!(order = %token.short(), "An unanswered pre-deduct's flow was already committed; its order stands.");
                let order = OrderPlaced::new(
                    token.clone(),
                    claims.user_id,
                    quantity,
                    chrono::Utc::now().timestamp_millis(),
                );
                self.deliver_committed(&order).await
            }
            Withdrawal::Withdrawn | Withdrawal::Pending => Err(unanswered(error)),
        }
    }

    /// Gives the token back with `release.lua`, asking up to [`REDIS_RETRIES`] times. When
    /// Redis answers none of them, a task of its own goes on asking (see [`keep_withdrawing`])
    /// and the purchase is answered as withdrawn: answering 202 instead would promise an
    /// order for a flow Redis may have lost, and the release that finally lands ends with
    /// nothing reserved.
    async fn withdraw(&self, token: &OrderToken, reason: &'static str) -> Withdrawal {
        for attempt in 0..REDIS_RETRIES {
            if attempt > 0 {
                tokio::time::sleep(REDIS_RETRY_PAUSE).await;
            }
            match release(&self.cache, token, reason).await {
                Ok(ReleaseOutcome::AlreadyCommitted) => return Withdrawal::Committed,
                Ok(ReleaseOutcome::Released | ReleaseOutcome::NothingReserved) => {
                    return Withdrawal::Withdrawn;
                }
                Err(error) => {
                    tracing::warn!(order = %token.short(), attempt, reason, error = ?error, "release.lua failed.");
                }
            }
        }
        tracing::warn!(order = %token.short(), reason, "Redis answered no release; the gateway goes on giving the token back in the background.");
        metrics::counter!("seckill_withdrawals_in_background_total").increment(1);
        tokio::spawn(keep_withdrawing(self.cache.clone(), token.clone(), reason));
        Withdrawal::Pending
    }

    async fn release_after_failed_send(
        &self,
        order: &OrderPlaced,
        send_error: order_queue::SendFailed,
    ) -> Result<(), ApiError> {
        match self.withdraw(&order.order_token, "send_failed").await {
            // A check-back got there first and committed: the order is on its way.
            Withdrawal::Committed => self.deliver_committed(order).await,
            Withdrawal::Withdrawn | Withdrawal::Pending => {
                outcome("send_failed");
                Err(ApiError::unavailable(
                    "the broker cannot be reached",
                    send_error,
                ))
            }
        }
    }
}

/// What giving a refused purchase's token back came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Withdrawal {
    /// Nothing is reserved for the token and it is tombstoned: no path can make it an order.
    Withdrawn,
    /// Its flow is committed: an order is owed, and the purchase is answered 202.
    Committed,
    /// Redis answered none of the releases; a background task goes on asking.
    Pending,
}

/// `release.lua`, timed, traced and counted by what it did.
async fn release(
    cache: &StockCache,
    token: &OrderToken,
    reason: &'static str,
) -> Result<ReleaseOutcome, stock_cache::CacheError> {
    let started = Instant::now();
    let released = cache
        .release(token, reason)
        .instrument(lua_span("release"))
        .await;
    lua_seconds("release", started);
    if let Ok(released) = &released {
        let label = match released {
            ReleaseOutcome::Released => "released",
            ReleaseOutcome::NothingReserved => "nothing_reserved",
            ReleaseOutcome::AlreadyCommitted => "already_committed",
        };
        metrics::counter!("seckill_releases_total", "outcome" => label, "reason" => reason)
            .increment(1);
    }
    released
}

/// The release of a purchase already answered 503, asked again with growing pauses until
/// Redis answers or [`WITHDRAW_PATIENCE`] runs out. Until then the flow, if any, is reserved
/// with no message (nothing commits it but a reconcile run, past its grace window) or with a
/// half message whose check-back would commit it: the sooner the release lands, the smaller
/// that window. A release that finds the flow committed after all has broken the 503's
/// promise, and says so loudly.
async fn keep_withdrawing(cache: StockCache, token: OrderToken, reason: &'static str) {
    let given_up_at = Instant::now() + WITHDRAW_PATIENCE;
    let mut pause = REDIS_RETRY_PAUSE;
    while Instant::now() < given_up_at {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(WITHDRAW_PAUSE_MAX);
        match release(&cache, &token, reason).await {
            Ok(ReleaseOutcome::AlreadyCommitted) => {
                metrics::counter!("seckill_withdrawals_late_total", "outcome" => "committed")
                    .increment(1);
                tracing::error!(order = %token.short(), reason, "A purchase answered 503 was committed before its release landed: the buyer has an order.");
                return;
            }
            Ok(_) => {
                metrics::counter!("seckill_withdrawals_late_total", "outcome" => "withdrawn")
                    .increment(1);
                tracing::info!(order = %token.short(), reason, "A refused purchase's token was given back late.");
                return;
            }
            Err(_) => {}
        }
    }
    metrics::counter!("seckill_withdrawals_late_total", "outcome" => "gave_up").increment(1);
    tracing::error!(order = %token.short(), reason, "Redis answered no release of a purchase answered 503; reconcile will settle its flow, if any.");
}

/// The 503 of a purchase whose pre-deduct Redis did not answer, or whose reservation the
/// replicas did not acknowledge, counted.
fn unanswered(error: stock_cache::CacheError) -> ApiError {
    if error.reserved_unreplicated() {
        outcome("not_replicated");
        return ApiError::unavailable("Redis replicas did not acknowledge in time", error);
    }
    outcome("unanswered");
    ApiError::unavailable("Redis did not answer in time", error)
}

/// The 503 of a purchase whose local transaction gave no answer and whose flow is not
/// committed, counted.
fn unconfirmed() -> ApiError {
    outcome("unconfirmed");
    ApiError::Unavailable {
        message: "the order could not be confirmed",
        cause: None,
    }
}

fn answer(decision: TxDecision) -> &'static str {
    match decision {
        TxDecision::Commit => "commit",
        TxDecision::Rollback => "rollback",
        TxDecision::Unknown => "unknown",
    }
}

/// The local transaction and the check-back: both are `confirm.lua`. The client calls
/// them on its own blocking threads, so they drive Redis on a runtime of their own.
pub struct ConfirmInRedis {
    pub cache: StockCache,
    pub runtime: Handle,
    /// Where the purchase path leaves the span of each send in flight.
    pub send_spans: Arc<SendSpans>,
}

impl ConfirmInRedis {
    /// confirm.lua for the orders of one message, inside `span` (entered on this thread, so
    /// log lines carry its trace id).
    fn confirm(
        &self,
        tokens: &[OrderToken],
        span: tracing::Span,
        kind: &'static str,
    ) -> TxDecision {
        let decision = span.in_scope(|| {
            let started = Instant::now();
            let confirmed = self
                .runtime
                .block_on(self.cache.confirm_all(tokens).instrument(lua_span("confirm")));
            lua_seconds("confirm", started);
            match confirmed {
                Ok(true) => TxDecision::Commit,
                Ok(false) => TxDecision::Rollback,
                Err(error) => {
                    tracing::warn!(order = %tokens[0].short(), orders = tokens.len(), error = ?error, "confirm.lua failed; the broker will check back.");
                    TxDecision::Unknown
                }
            }
        });
        span.record("answer", answer(decision));
        metrics::counter!("seckill_checkbacks_total", "kind" => kind, "answer" => answer(decision))
            .increment(1);
        decision
    }
}

impl LocalTransaction for ConfirmInRedis {
    fn execute(&self, orders: &[OrderPlaced]) -> TxDecision {
        // Crash point 2: the half message is stored and the flows reserved, but no answer
        // will come from here; the broker's check-back, served by any gateway of the
        // producer group, commits them from the flow records.
        platform::crash_point!("gateway::in_local_transaction");
        // Fault drills: the local transaction gives no answer, as when confirm.lua times out.
        #[cfg(feature = "failpoints")]
        platform::faults::fail::fail_point!("gateway::local_transaction_unanswered", |_| {
            TxDecision::Unknown
        });
        let tokens: Vec<OrderToken> = orders.iter().map(|o| o.order_token.clone()).collect();
        // Under the first order's send; the other purchases' traces show their own sends.
        let parent = self.send_spans.get(&tokens[0]);
        let span = tracing::info_span!(
            parent: parent.as_ref().and_then(tracing::Span::id),
            "local_transaction",
            order = %tokens[0].short(),
            orders = tokens.len(),
            answer = tracing::field::Empty,
        );
        self.confirm(&tokens, span, "local")
    }

    fn check(&self, order_tokens: &[OrderToken]) -> TxDecision {
        // Fault drills: the check-back is answered "unknown" while armed, as if it came later
        // than the drill's steps (the broker asks seconds to minutes after the send).
        #[cfg(feature = "failpoints")]
        platform::faults::fail::fail_point!("gateway::check_back_unanswered", |_| {
            TxDecision::Unknown
        });
        // The broker asks about a half message, maybe long after the purchase and on another
        // gateway: a trace of its own, which names the (first) order token for the operator.
        let span = tracing::info_span!(
            parent: None,
            "check_back",
            order = %order_tokens[0].short(),
            orders = order_tokens.len(),
            answer = tracing::field::Empty,
        );
        annotate(&span, ORDER_TOKEN_ATTRIBUTE, order_tokens[0].to_string());
        self.confirm(order_tokens, span, "check_back")
    }
}
