//! The purchase path, in the order DESIGN.md gives it and for the reasons it gives:
//! the Lua pre-deduct first (the crowd stops there), then — winners only — the
//! transactional message, whose local transaction is `confirm.lua`. A send that fails
//! runs `release.lua`, which refuses to give back a unit a check-back has committed.

use std::sync::Arc;
use std::time::Instant;

use domain::{OrderPlaced, PreDeductOutcome, PurchaseClaims};
use order_queue::{LocalTransaction, OrderPublisher, TxDecision};
use stock_cache::{ReleaseOutcome, StockCache};
use tokio::runtime::Handle;

use crate::error::ApiError;
use crate::sold_out::SoldOutFlags;

pub struct PurchaseDesk {
    cache: StockCache,
    publisher: Arc<OrderPublisher>,
    sold_out: Arc<SoldOutFlags>,
}

fn outcome(label: &'static str) {
    metrics::counter!("seckill_purchases_total", "outcome" => label).increment(1);
}

impl PurchaseDesk {
    pub fn new(
        cache: StockCache,
        publisher: Arc<OrderPublisher>,
        sold_out: Arc<SoldOutFlags>,
    ) -> Self {
        Self {
            cache,
            publisher,
            sold_out,
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
            .pre_deduct(&claims.order_token, claims.user_id, quantity)
            .await;
        metrics::histogram!("seckill_lua_seconds", "script" => "pre_deduct")
            .record(started.elapsed().as_secs_f64());
        let reserved_at_ms = chrono::Utc::now().timestamp_millis();
        match reserved.map_err(|e| ApiError::unavailable("Redis cannot be reached", e))? {
            PreDeductOutcome::Reserved { stock_after } => {
                if stock_after == 0 {
                    self.sold_out.mark(product);
                }
            }
            PreDeductOutcome::SoldOut { stock_left } => {
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

        let order = OrderPlaced::new(
            claims.order_token.clone(),
            claims.user_id,
            quantity,
            reserved_at_ms,
        );
        let traceparent = platform::telemetry::current_traceparent();
        let started = Instant::now();
        let sent = self
            .publisher
            .send_in_transaction(&order, traceparent.as_deref())
            .await;
        metrics::histogram!("seckill_send_seconds").record(started.elapsed().as_secs_f64());
        match sent {
            // Unknown: the half message is stored and the flow is there, so the broker's
            // check-back will run confirm.lua and commit it.
            Ok(TxDecision::Commit | TxDecision::Unknown) => {
                outcome("accepted");
                Ok(())
            }
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

    async fn release_after_failed_send(
        &self,
        order: &OrderPlaced,
        send_error: order_queue::MqError,
    ) -> Result<(), ApiError> {
        let token = &order.order_token;
        match self.cache.release(token, "send_failed").await {
            // A check-back got there first and committed: the order is on its way.
            Ok(ReleaseOutcome::AlreadyCommitted) => {
                outcome("accepted");
                Ok(())
            }
            Ok(released) => {
                metrics::counter!("seckill_releases_total", "outcome" => format!("{released:?}"))
                    .increment(1);
                outcome("send_failed");
                Err(ApiError::unavailable(
                    "the broker cannot be reached",
                    send_error,
                ))
            }
            Err(release_error) => {
                // The flow stays reserved: a check-back commits it if the half message
                // was stored after all, and reconcile settles it otherwise.
                tracing::warn!(%token, error = ?release_error, "Release after a failed send failed; reconcile will settle the flow.");
                outcome("send_failed");
                Err(ApiError::unavailable(
                    "the broker cannot be reached",
                    send_error,
                ))
            }
        }
    }
}

/// The local transaction and the check-back: both are `confirm.lua`. The client calls
/// them on its own blocking threads, so they drive Redis on a runtime of their own.
pub struct ConfirmInRedis {
    pub cache: StockCache,
    pub runtime: Handle,
}

impl ConfirmInRedis {
    fn confirm(&self, token: &domain::OrderToken, answer_kind: &'static str) -> TxDecision {
        let decision = match self.runtime.block_on(self.cache.confirm(token)) {
            Ok(true) => TxDecision::Commit,
            Ok(false) => TxDecision::Rollback,
            Err(error) => {
                tracing::warn!(%token, error = ?error, "confirm.lua failed; the broker will check back.");
                TxDecision::Unknown
            }
        };
        metrics::counter!("seckill_checkbacks_total", "kind" => answer_kind, "answer" => format!("{decision:?}"))
            .increment(1);
        decision
    }
}

impl LocalTransaction for ConfirmInRedis {
    fn execute(&self, order: &OrderPlaced) -> TxDecision {
        self.confirm(&order.order_token, "local")
    }

    fn check(&self, order_token: &domain::OrderToken) -> TxDecision {
        self.confirm(order_token, "check_back")
    }
}
