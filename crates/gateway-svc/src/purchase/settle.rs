//! What the purchase does when the answer is not a plain yes. Two promises shape it.
//!
//! **Unsettled is no order**: before a purchase is answered unsettled (503) after its
//! pre-deduct, its token goes through `release.lua` — the unit goes back, or a token that
//! reserved nothing is tombstoned — because a flow left reserved is turned into an order
//! later (a check-back commits it, or reconcile re-publishes it). That covers a failed send,
//! a message rolled back (by confirm.lua, or by the client without running it when the
//! broker answers a flush or replica timeout), a local transaction with no answer, and a
//! pre-deduct Redis did not answer (its script may still run once Redis catches up).
//! `release.lua` refuses a committed flow: that purchase is queued.
//!
//! **Queued is an order**: it is given on the broker's COMMIT, or on a flow the gateway
//! committed itself, whose order it then sends as a plain message rather than leave it to a
//! check-back that, seconds or minutes later, decides from a Redis that may have lost the
//! flow by then.

use std::time::{Duration, Instant};

use chrono::Utc;
use domain::{OrderPlaced, OrderToken, PurchaseClaims, PurchaseOutcome, Unsettled};
use stock_cache::{ReleaseOutcome, StockCache};
use tracing::Instrument;

use super::PurchaseDesk;
use super::decision::{self, AfterConfirm, Withdraw, Withdrawal};
use super::record::{lua_seconds, lua_span};

/// How often, and how far apart, a purchase whose outcome Redis left open (a local
/// transaction with no answer, a pre-deduct with no answer) asks Redis again before
/// answering: long enough to ride out a Redis restart or failover.
const REDIS_RETRIES: u32 = 5;
const REDIS_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// How long a refused purchase's release goes on in the background once Redis has answered
/// none of the [`REDIS_RETRIES`]: well past reconcile's grace window (120 s by default),
/// before which nothing else touches a reserved flow that has no message.
const WITHDRAW_PATIENCE: Duration = Duration::from_secs(600);
/// The longest pause between two background releases.
const WITHDRAW_PAUSE_MAX: Duration = Duration::from_secs(5);

/// Attempts at the plain message of an order whose flow the gateway committed itself.
const PLAIN_SEND_ATTEMPTS: u32 = 2;

impl PurchaseDesk {
    /// The local transaction gave no answer (Redis did not answer confirm.lua, or the
    /// client's pool had no thread for it); the half message is stored and waits for the
    /// broker's check-back. Queued is only answered once confirm.lua has committed the
    /// flow, and then the order also leaves as a plain message ([`Self::deliver_committed`]):
    /// the check-back may come minutes later and finds no flow if Redis lost it meanwhile
    /// (an operator's reload rebuilds only the flows of orders MySQL holds), which would
    /// roll the message back under a buyer told 202. Redis answering "no flow" has
    /// tombstoned the token, or has lost the product (a reload then rebuilds no flow for
    /// it): unsettled, and the check-back rolls back. Redis not answering at all: the token
    /// is given back first.
    pub(super) async fn settle_unknown(&self, order: &OrderPlaced) -> PurchaseOutcome {
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
            match decision::after_confirm(confirmed.as_ref().copied()) {
                AfterConfirm::Committed => return self.deliver_committed(order).await,
                AfterConfirm::Unconfirmed => {
                    return PurchaseOutcome::unsettled(Unsettled::Unconfirmed);
                }
                AfterConfirm::AskAgain => {
                    tracing::warn!(order = %token.short(), attempt, error = ?confirmed.err(), "confirm.lua failed after an unanswered local transaction.");
                }
            }
        }
        let withdrawal = self.withdraw(token, "unconfirmed").await;
        match decision::after_withdrawal(withdrawal, Unsettled::Unconfirmed) {
            None => self.deliver_committed(order).await,
            Some(why) => PurchaseOutcome::unsettled(why),
        }
    }

    /// The message was rolled back, or not sent: the token is given back before the answer.
    ///
    /// A rollback: either confirm.lua decided it (a flow of the message was gone; it gave
    /// the reserved ones back), or the client did without running the local transaction: it
    /// does so when the broker stored the half message but answered FLUSH_DISK_TIMEOUT,
    /// FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE, and then the flow is still reserved —
    /// reconcile would turn it into an order for a buyer told 503. A failed send: a
    /// check-back may have got there first and committed. Either way a flow committed on
    /// its own (reconcile, a check-back, or this gateway after an unanswered local
    /// transaction) has its order on the way, and is queued.
    pub(super) async fn withdraw_after_send(
        &self,
        order: &OrderPlaced,
        withdraw: Withdraw,
        send_error: Option<order_queue::SendFailed>,
    ) -> PurchaseOutcome {
        let withdrawal = self.withdraw(&order.order_token, withdraw.reason).await;
        match decision::after_withdrawal(withdrawal, withdraw.why) {
            None => self.deliver_committed(order).await,
            Some(why) => match send_error {
                Some(error) => PurchaseOutcome::unsettled_by(why, error),
                None => PurchaseOutcome::unsettled(why),
            },
        }
    }

    /// The order of a flow that is committed, sent as a plain message before the answer
    /// (see [`Self::settle_unknown`]). The consumer writes an order once, whatever number of
    /// messages carry it, so the half message committed later by its check-back is harmless.
    /// Should the plain send fail too, the purchase is still queued: release.lua refuses a
    /// committed flow, so the check-back commits the half message, or reconcile re-publishes
    /// the order — unless Redis loses the flow first (see docs/operations.md, "Failure
    /// modes").
    async fn deliver_committed(&self, order: &OrderPlaced) -> PurchaseOutcome {
        let queued = PurchaseOutcome::Queued {
            order_token: order.order_token.clone(),
        };
        for attempt in 0..PLAIN_SEND_ATTEMPTS {
            match self.sender.publish(order).await {
                Ok(()) => {
                    metrics::counter!("seckill_orders_sent_plain_total", "outcome" => "stored")
                        .increment(1);
                    return queued;
                }
                Err(error) => {
                    tracing::warn!(order = %order.order_token.short(), attempt, error = %error, "The plain message of a committed order was not stored.");
                }
            }
        }
        metrics::counter!("seckill_orders_sent_plain_total", "outcome" => "failed").increment(1);
        tracing::warn!(order = %order.order_token.short(), "A committed order goes to the check-back or reconcile: its plain message was not stored.");
        queued
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
    pub(super) async fn withdraw_reservation(
        &self,
        claims: &PurchaseClaims,
        quantity: u32,
        withdraw: Withdraw,
        error: stock_cache::CacheError,
    ) -> PurchaseOutcome {
        let token = &claims.order_token;
        let withdrawal = self.withdraw(token, withdraw.reason).await;
        match decision::after_withdrawal(withdrawal, withdraw.why) {
            // Only confirm.lua commits a flow, and no message was sent for this one: a
            // reconcile run would have to have confirmed it. Its order is on the way.
            None => {
                tracing::warn!(order = %token.short(), "An unanswered pre-deduct's flow was already committed; its order stands.");
                let order = OrderPlaced::new(
                    token.clone(),
                    claims.user_id,
                    quantity,
                    Utc::now().timestamp_millis(),
                );
                self.deliver_committed(&order).await
            }
            Some(why) => PurchaseOutcome::unsettled_by(why, error),
        }
    }

    /// Gives the token back with `release.lua`, asking up to [`REDIS_RETRIES`] times. When
    /// Redis answers none of them, a task of its own goes on asking (see [`keep_withdrawing`])
    /// and the purchase is answered as withdrawn: answering queued instead would promise an
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
