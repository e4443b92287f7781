//! The deadline's side: when a batch's `pay_by` comes, the broker hands its deadline
//! message back here, and every order of it still awaiting payment expires, its units
//! going back to the sale (`order_lifecycle::close`).
//!
//! A deadline may come twice (the broker redelivers after a restart) and may race a
//! payment or a cancel for the same order: MySQL's conditional write lets exactly one of
//! them end it, and the expiry of an order that already ended is a no-op, apart from
//! returning its units in Redis should an earlier run have died before doing so.

use domain::Closing;
use order_lifecycle::Ending;
use order_queue::{Deadline, Due};
use order_store::Db;
use stock_cache::StockCache;

pub struct Expirer {
    db: Db,
    cache: StockCache,
}

impl Expirer {
    pub fn new(db: Db, cache: StockCache) -> Self {
        Self { db, cache }
    }

    /// Expires the orders of `deadline` that are still unpaid. Asks for the deadline again
    /// later when MySQL cannot answer, or when an order is not yet due by MySQL's clock
    /// (the broker may deliver a moment early): an order is never expired before its time.
    pub async fn expire(&self, deadline: Deadline) -> Due {
        let mut again = false;
        for token in &deadline.order_tokens {
            match order_lifecycle::close(&self.db, &self.cache, token, Closing::Expired).await {
                Ok(Ending::Now(row)) => {
                    if let Some(pay_by) = row.pay_by {
                        let late = chrono::Utc::now().signed_duration_since(pay_by);
                        metrics::histogram!("seckill_expiry_lag_seconds")
                            .record(late.num_milliseconds().max(0) as f64 / 1e3);
                    }
                }
                // Paid or cancelled first, expired by an earlier delivery, or never written.
                Ok(Ending::Before(_) | Ending::Unknown) => {}
                Ok(Ending::NotDue(_)) => again = true,
                Err(error) => {
                    tracing::warn!(order = %token.short(), error = %error, "Cannot expire an order now; the deadline comes again.");
                    again = true;
                }
            }
        }
        if again { Due::RetryLater } else { Due::Done }
    }
}
