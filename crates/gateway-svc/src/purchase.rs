//! The purchase path, in the order DESIGN.md gives it and for the reasons it gives:
//! the Lua pre-deduct first (the crowd stops there), then — winners only — the
//! transactional message, whose local transaction is `confirm.lua`. A send that fails
//! runs `release.lua`, which refuses to give back a unit a check-back has committed; so
//! does a pre-deduct that Redis did not answer in time, because its script may still
//! reserve a unit once Redis catches up, for a buyer who was told the purchase failed.
//! Winners of one product that arrive while the broker is busy share a message
//! ([`OrderBatcher`]): its local transaction confirms all of their flows or none.
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
use platform::telemetry::{ORDER_TOKEN_ATTRIBUTE, annotate, short_token};
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
        order = %short_token(token),
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
    /// Ok means the order is queued: the message is committed or will be by check-back.
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
            Err(error) if error.may_have_run() => {
                return self.withdraw_unanswered(&claims.order_token, error).await;
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
            // The half message is stored, but the local transaction gave no answer (Redis
            // did not answer, or the client's pool had no thread for it): ask again here
            // before telling the buyer anything.
            Ok(TxDecision::Unknown) => self.settle_unknown(&order.order_token).await,
            Ok(TxDecision::Rollback) => {
                outcome("rolled_back");
                Err(ApiError::Unavailable {
                    message: "the order could not be confirmed",
                    cause: None,
                })
            }
            Err(send_error) => self.release_after_failed_send(&order, send_error).await,
        }
    }

    /// A 202 promises an order, so it is only given once confirm.lua has committed the
    /// flow: then the broker's check-back commits the message too. Redis answering "no
    /// flow" (released, or lost with the product) means the check-back will roll it back;
    /// Redis not answering at all leaves the outcome to the check-back, and the buyer is
    /// told to poll the order rather than promised one.
    async fn settle_unknown(&self, token: &OrderToken) -> Result<(), ApiError> {
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
                Ok(true) => {
                    outcome("accepted");
                    return Ok(());
                }
                Ok(false) | Err(stock_cache::CacheError::NotLoaded) => break,
                Err(error) => {
                    tracing::warn!(order = %short_token(token), attempt, error = ?error, "confirm.lua failed after an unanswered local transaction.");
                }
            }
        }
        outcome("unconfirmed");
        Err(ApiError::Unavailable {
            message: "the order could not be confirmed; its status tells whether it was placed",
            cause: None,
        })
    }

    /// Redis did not answer the pre-deduct, but may have run it, or may still: while Redis
    /// is stalled the script waits in its input and reserves once Redis catches up. Told
    /// 503, the buyer must not get that unit (reconcile would otherwise turn the lone flow
    /// into an order), so the token is given back first: `release.lua` returns a unit that
    /// was reserved, and tombstones a token that reserved nothing, which a late pre-deduct
    /// then refuses. Either order of the two scripts ends with nothing reserved. Asked a few
    /// times; if Redis answers none of them the flow, if any, is left to reconcile.
    async fn withdraw_unanswered(
        &self,
        token: &OrderToken,
        error: stock_cache::CacheError,
    ) -> Result<(), ApiError> {
        for attempt in 0..REDIS_RETRIES {
            if attempt > 0 {
                tokio::time::sleep(REDIS_RETRY_PAUSE).await;
            }
            match self.release(token, "pre_deduct_unanswered").await {
                // Only confirm.lua commits a flow, and no message was sent for this one: a
                // reconcile run would have to have confirmed it. Its order is on the way.
                Ok(ReleaseOutcome::AlreadyCommitted) => {
                    tracing::warn!(order = %short_token(token), "An unanswered pre-deduct's flow was already committed; its order stands.");
                    outcome("accepted");
                    return Ok(());
                }
                Ok(_) => return Err(unanswered(error)),
                Err(release_error) => {
                    tracing::warn!(order = %short_token(token), attempt, error = ?release_error, "release.lua failed after an unanswered pre-deduct.");
                }
            }
        }
        tracing::warn!(order = %short_token(token), "An unanswered pre-deduct may hold a unit; reconcile will settle its flow.");
        Err(unanswered(error))
    }

    /// `release.lua`, timed, traced and counted by what it did.
    async fn release(
        &self,
        token: &OrderToken,
        reason: &'static str,
    ) -> Result<ReleaseOutcome, stock_cache::CacheError> {
        let started = Instant::now();
        let released = self
            .cache
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

    async fn release_after_failed_send(
        &self,
        order: &OrderPlaced,
        send_error: order_queue::SendFailed,
    ) -> Result<(), ApiError> {
        let token = &order.order_token;
        match self.release(token, "send_failed").await {
            // A check-back got there first and committed: the order is on its way.
            Ok(ReleaseOutcome::AlreadyCommitted) => {
                outcome("accepted");
                Ok(())
            }
            Ok(_) => {
                outcome("send_failed");
                Err(ApiError::unavailable(
                    "the broker cannot be reached",
                    send_error,
                ))
            }
            Err(release_error) => {
                // The flow stays reserved: a check-back commits it if the half message
                // was stored after all, and reconcile settles it otherwise.
                tracing::warn!(order = %short_token(token), error = ?release_error, "Release after a failed send failed; reconcile will settle the flow.");
                outcome("send_failed");
                Err(ApiError::unavailable(
                    "the broker cannot be reached",
                    send_error,
                ))
            }
        }
    }
}

/// The 503 of a purchase whose pre-deduct Redis did not answer, counted.
fn unanswered(error: stock_cache::CacheError) -> ApiError {
    outcome("unanswered");
    ApiError::unavailable("Redis did not answer in time", error)
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
                    tracing::warn!(order = %short_token(&tokens[0]), orders = tokens.len(), error = ?error, "confirm.lua failed; the broker will check back.");
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
        let tokens: Vec<OrderToken> = orders.iter().map(|o| o.order_token.clone()).collect();
        // Under the first order's send; the other purchases' traces show their own sends.
        let parent = self.send_spans.get(&tokens[0]);
        let span = tracing::info_span!(
            parent: parent.as_ref().and_then(tracing::Span::id),
            "local_transaction",
            order = %short_token(&tokens[0]),
            orders = tokens.len(),
            answer = tracing::field::Empty,
        );
        self.confirm(&tokens, span, "local")
    }

    fn check(&self, order_tokens: &[OrderToken]) -> TxDecision {
        // The broker asks about a half message, maybe long after the purchase and on another
        // gateway: a trace of its own, which names the (first) order token for the operator.
        let span = tracing::info_span!(
            parent: None,
            "check_back",
            order = %short_token(&order_tokens[0]),
            orders = order_tokens.len(),
            answer = tracing::field::Empty,
        );
        annotate(&span, ORDER_TOKEN_ATTRIBUTE, order_tokens[0].to_string());
        self.confirm(order_tokens, span, "check_back")
    }
}
