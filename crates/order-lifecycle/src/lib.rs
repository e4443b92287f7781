//! How an order ends, across both stores: MySQL decides, Redis follows.
//!
//! A confirmed order ends exactly once, as paid, cancelled or expired. The payment
//! callback, the buyer's cancel and the deadline may race on different processes; one
//! conditional write in MySQL picks the winner (`order_store::Db::close_order`,
//! `record_payment`), and everyone else reads the winner's status. Only then is Redis told:
//! a cancelled or expired order's units go back to the sale through a script that returns
//! a unit at most once (`stock_cache::StockCache::return_units`), a paid order's status is
//! recorded for the buyers polling it. Each also publishes the change for the gateways'
//! event streams.
//!
//! If the process dies between the two, MySQL already holds the truth and the Redis step
//! is repeated by whoever comes next: a redelivered deadline, the buyer's cancel asked
//! again (answered `ORDER_CLOSED`, yet the units still go back), or reconcile, which
//! returns in Redis what MySQL closed. That is why every path below runs the Redis step
//! whenever MySQL says the order's units are to go back, not only when this call won.
//!
//! The gateway (cancel, payment), the order consumer (deadline) and reconcile (overdue
//! sweep, repair) all end orders through here, so they cannot disagree on the order of
//! the two steps.
//!
//! With the `failpoints` feature (turned on by the services' own), `close` has the crash
//! point `lifecycle::after_close` between the two steps, for the fault drills
//! (`platform::crash_point!`; armed by `FAILPOINTS` in a service that arms its points).

use domain::{Closing, OrderStatus, OrderToken};
use order_store::{CloseOutcome, Db, OrderRow, Payment, PaymentOutcome, StoreError};
use stock_cache::{ReturnOutcome, StockCache};

/// How an attempt to end an order went.
#[derive(Debug)]
pub enum Ending {
    /// This call ended it.
    Now(OrderRow),
    /// It had already ended (paid, cancelled or expired): the row says how.
    Before(OrderRow),
    /// An expiry asked before the order's `pay_by`: nothing changed.
    NotDue(OrderRow),
    /// MySQL has no such order (it may still be queued).
    Unknown,
}

/// Ends `token` for `why`, in MySQL and then in Redis.
pub async fn close(
    db: &Db,
    cache: &StockCache,
    token: &OrderToken,
    why: Closing,
) -> Result<Ending, StoreError> {
    let ending = match db.close_order(token, why).await? {
        CloseOutcome::Closed(row) => {
            metrics::counter!("seckill_orders_ended_total", "status" => why.as_str()).increment(1);
            Ending::Now(row)
        }
        CloseOutcome::AlreadyEnded(row) => Ending::Before(row),
        CloseOutcome::NotDue(row) => Ending::NotDue(row),
        CloseOutcome::Unknown => Ending::Unknown,
    };
    if let Ending::Now(row) | Ending::Before(row) = &ending
        && let Some(closing) = closing_of(row.status)
    {
        // Where the fault drills end the process: MySQL has closed the order, Redis has
        // not been told (see above for who repeats the Redis step).
        platform::crash_point!("lifecycle::after_close");
        give_back_in_redis(cache, token, closing).await;
    }
    Ok(ending)
}

/// Records a payment in MySQL, then its status in Redis.
pub async fn pay(
    db: &Db,
    cache: &StockCache,
    payment: &Payment,
) -> Result<PaymentOutcome, StoreError> {
    let outcome = db.record_payment(payment).await?;
    let label = match &outcome {
        PaymentOutcome::Paid(row) => {
            if let Err(error) = cache.mark_paid(&payment.order_token).await {
                // MySQL has it; a poll of Redis shows `confirmed` until reconcile or the
                // next callback of this payment writes it again.
                tracing::warn!(order = %payment.order_token.short(), error = %error, "Payment recorded, but Redis was not told.");
            }
            let waited = payment.paid_at.signed_duration_since(row.created_at);
            metrics::histogram!("seckill_time_to_pay_seconds")
                .record(waited.num_milliseconds().max(0) as f64 / 1e3);
            "paid"
        }
        PaymentOutcome::Closed(_) => "refund_due",
        PaymentOutcome::AmountMismatch { .. } => "amount_mismatch",
        PaymentOutcome::Unknown => "unknown_order",
    };
    metrics::counter!("seckill_payments_total", "outcome" => label).increment(1);
    Ok(outcome)
}

/// Returns the units of an order MySQL has closed to the sale in Redis. Failures are
/// logged, not raised: MySQL holds the truth, and reconcile returns what is left.
pub async fn give_back_in_redis(cache: &StockCache, token: &OrderToken, why: Closing) {
    match cache.return_units(token, why).await {
        Ok(ReturnOutcome::Returned) => {
            metrics::counter!("seckill_units_returned_total", "why" => why.as_str()).increment(1);
        }
        Ok(ReturnOutcome::AlreadyReturned) => {}
        Ok(outcome @ (ReturnOutcome::NotLoaded | ReturnOutcome::NotHeld)) => {
            tracing::warn!(order = %token.short(), ?outcome, "Redis holds no units of a closed order; reconcile reports it.");
        }
        Err(error) => {
            tracing::warn!(order = %token.short(), error = %error, "Units of a closed order not yet returned in Redis; reconcile returns them.");
        }
    }
}

/// The closing behind a status whose units go back, if it is one.
pub fn closing_of(status: OrderStatus) -> Option<Closing> {
    match status {
        OrderStatus::Cancelled => Some(Closing::Cancelled),
        OrderStatus::Expired => Some(Closing::Expired),
        _ => None,
    }
}
