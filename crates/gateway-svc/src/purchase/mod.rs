//! The purchase, top to bottom, in the order docs/architecture.md ("The purchase path")
//! gives and for the reasons it gives: the cheap checks first (the quantity, one read of
//! the sold-out flag, the token, a place among the purchases under way, the buyer's
//! budget), then the Lua pre-deduct (the crowd stops there), then — winners only — the
//! transactional message, whose local transaction is `confirm.lua`. Winners of one product
//! that arrive while the broker is busy share a message ([`OrderBatcher`]): its local
//! transaction confirms all of their flows or none.
//!
//! - [`decision`]: what each answer on the way means, as pure functions;
//! - [`settle`]: what is done when the answer is not a plain yes — the token given back,
//!   a committed order sent plainly (the module's docs give the two promises behind it);
//! - [`confirm`]: the local transaction and the check-back;
//! - [`record`]: the outcome counted once where the purchase ends, and the spans.
//!
//! Spans (children of the purchase's): `lua.pre_deduct`, `mq.send_half` and, inside it, the
//! `local_transaction` (run by the client on its own thread, under the span the batcher
//! handed the client beside the message) with its `lua.confirm`; `lua.release` after a failed send. The `lua.*`
//! and `mq.send_half` spans only while spans are exported. A broker check-back arrives
//! with nothing but the order token: it starts a trace of its own that names the token.

mod confirm;
pub mod decision;
pub mod record;
mod settle;

use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use domain::{
    OrderPlaced, ProductId, PurchaseClaims, PurchaseOutcome, Refusal, TokenSigner, Unsettled,
    UserId,
};
use order_queue::OrderBatcher;
use stock_cache::StockCache;
use tokio::sync::oneshot;
use tracing::Instrument;

pub use confirm::ConfirmInRedis;
use decision::{AfterSend, Reserved};

use crate::rate_limit::{PurchaseSlot, RateLimits};
use crate::sold_out::SoldOutFlags;

pub struct PurchaseDesk {
    cache: StockCache,
    sender: OrderBatcher,
    sold_out: Arc<SoldOutFlags>,
    limits: Arc<RateLimits>,
    signer: TokenSigner,
}

/// A purchase as the buyer asked for it: the product (its id already parsed), the
/// purchase token as sent, and how many units.
pub struct Order<'a> {
    pub buyer: UserId,
    pub product: ProductId,
    pub token: &'a str,
    pub quantity: u32,
}

impl PurchaseDesk {
    pub fn new(
        cache: StockCache,
        sender: OrderBatcher,
        sold_out: Arc<SoldOutFlags>,
        limits: Arc<RateLimits>,
        signer: TokenSigner,
    ) -> Self {
        Self {
            cache,
            sender,
            sold_out,
            limits,
            signer,
        }
    }

    /// The purchase, from the checks that cost nothing to the send. Queued means the order
    /// is queued: its message is committed, or its flow is committed and the order sent
    /// plainly (or, that failing, left to the check-back and reconcile). Unsettled after
    /// the pre-deduct means nothing is reserved for the token any more, or it is being
    /// given back (see [`settle`]).
    pub async fn purchase(self: &Arc<Self>, order: Order<'_>) -> PurchaseOutcome {
        let Order {
            buyer,
            product,
            token,
            quantity,
        } = order;
        if quantity == 0 {
            return Refusal::QuantityZero.into();
        }
        // The one read of the sold-out flag, before the token's signature: the signature
        // guards what a purchase changes, a reservation, and a refusal from the flag
        // changes nothing — after sell-out the crowd's requests are all refused here. So a
        // forged or expired token for a sold-out product is told SOLD_OUT, not
        // INVALID_TOKEN: what it would have been told with a valid token.
        let flagged = self.sold_out.is_sold_out(product);
        let span = record::purchase_span(product, buyer, flagged);
        if flagged {
            return record::answered(Refusal::SoldOut.into());
        }
        let admitted = match span.in_scope(|| self.admit(buyer, product, token)) {
            Ok(admitted) => admitted,
            Err(refusal) => return record::answered(refusal.into()),
        };
        self.detached(admitted, quantity).instrument(span).await
    }

    /// The token, then a place among the purchases under way, then the buyer's budget.
    fn admit(
        &self,
        buyer: UserId,
        product: ProductId,
        token: &str,
    ) -> Result<(PurchaseClaims, PurchaseSlot), Refusal> {
        let claims = self
            .signer
            .verify(token, Utc::now().timestamp_millis())
            .map_err(|error| Refusal::Token(error.into()))?;
        decision::token_fits(&claims, buyer, product)?;
        // Taken after the token check, so a forged token never holds one; before the
        // buyer's budget, so a purchase refused for want of one costs the buyer nothing.
        let slot = self.limits.enter_purchase()?;
        // The buyer's budget counts purchases that could reserve something: a malformed,
        // forged or foreign one is refused above without spending it.
        self.limits.check_user(buyer)?;
        Ok((claims, slot))
    }

    /// Runs the rest of the purchase to its end on a task of its own, holding its in-flight
    /// slot, and answers with its outcome. actix-web ends a request's handler when its
    /// connection is reset (a killed client, a proxy that gives up), and a purchase inside
    /// the handler then stopped wherever it was: after the pre-deduct and before the
    /// message, say, leaving the unit reserved for no one until reconcile. Detached, a
    /// purchase nobody waits for any more still sends its message, or gives its unit back.
    /// The task runs on the same worker thread (`actix_web::rt::spawn`): no hand-off to
    /// another thread. (It also keeps the purchase's large future — the pre-deduct, the
    /// send, their retries — out of the handler's, which actix-web moves several times.)
    async fn detached(
        self: &Arc<Self>,
        (claims, slot): (PurchaseClaims, PurchaseSlot),
        quantity: u32,
    ) -> PurchaseOutcome {
        let (answer, answered) = oneshot::channel();
        let desk = Arc::clone(self);
        actix_web::rt::spawn(
            async move {
                let outcome = desk.reserve_and_send(&claims, quantity).await;
                drop(slot);
                record::settled(&outcome, &claims.order_token, quantity);
                if let Err(unheard) = answer.send(outcome) {
                    record::unheard(unheard, &claims.order_token);
                }
            }
            .in_current_span(),
        );
        // Dropped without an answer only if the task was: it panicked, or the worker stopped.
        answered
            .await
            .unwrap_or_else(|ended| PurchaseOutcome::unsettled_by(Unsettled::Unanswered, ended))
    }

    /// The pre-deduct and, if it wins, the message.
    async fn reserve_and_send(&self, claims: &PurchaseClaims, quantity: u32) -> PurchaseOutcome {
        let product = claims.product_id();
        let started = Instant::now();
        let reserved = self
            .cache
            .pre_deduct_in_sale(&claims.order_token, claims.user_id, quantity, claims.sale)
            .instrument(record::lua_span("pre_deduct"))
            .await;
        record::lua_seconds("pre_deduct", started);
        let reserved_at_ms = Utc::now().timestamp_millis();
        let answer = match reserved {
            Ok(answer) => answer,
            Err(error) => {
                return match decision::pre_deduct_failed(
                    error.may_have_run(),
                    error.reserved_unreplicated(),
                ) {
                    Some(withdraw) => {
                        self.withdraw_reservation(claims, quantity, withdraw, error)
                            .await
                    }
                    None => PurchaseOutcome::unsettled_by(Unsettled::StoreUnreachable, error),
                };
            }
        };
        if let Some((stock_left, sold_out)) = decision::stock_seen(answer) {
            platform::ops::record_stock(product.get(), "redis", stock_left);
            if sold_out {
                self.sold_out.mark(product);
            }
        }
        match decision::reserved(answer) {
            Reserved::Won => {}
            Reserved::Refused(refusal) => return refusal.into(),
            Reserved::Unsettled(why) => return PurchaseOutcome::unsettled(why),
        }

        // Crash point 1: the unit is reserved in Redis and no message exists; reconcile
        // finds the flow once its grace window has passed.
        platform::crash_point!("gateway::after_pre_deduct");

        let send_span = record::send_span(&claims.order_token);
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
        let started = Instant::now();
        let sent = self
            .sender
            .send(order.clone(), cause)
            .instrument(send_span.clone())
            .await;
        metrics::histogram!("seckill_send_seconds").record(started.elapsed().as_secs_f64());
        match &sent {
            Ok(decision) => send_span.record("decision", record::answer(*decision)),
            Err(_) => send_span.record("decision", "send_failed"),
        };
        drop(send_span);
        match decision::after_send(&sent) {
            AfterSend::Queued => PurchaseOutcome::Queued {
                order_token: order.order_token,
            },
            // The half message is stored, but the local transaction gave no answer: ask
            // again here before telling the buyer anything.
            AfterSend::Confirm => self.settle_unknown(&order).await,
            AfterSend::Withdraw(withdraw) => {
                self.withdraw_after_send(&order, withdraw, sent.err()).await
            }
        }
    }
}
