//! One batch of order messages → one MySQL transaction → "confirmed" in Redis.
//!
//! Failure policy: a message that can never succeed (undecodable, wrong version, values the
//! store cannot hold) is recorded in `rejected_message` and acknowledged; anything that may
//! pass (MySQL or Redis down, a lock timeout) hands the whole batch back to the broker, which
//! redelivers it after its backoff — the write is idempotent, so redelivery is harmless.

use std::time::Instant;

use domain::OrderPlaced;
use order_queue::{BatchHandler, BatchVerdict, Delivery};
use order_store::{Db, StoreError, WriteSummary};
use stock_cache::StockCache;
use tokio::runtime::Handle;

pub struct OrderWriter {
    pub db: Db,
    pub cache: StockCache,
    /// The client calls `handle` on its own blocking threads; the async work runs here.
    pub runtime: Handle,
}

impl BatchHandler for OrderWriter {
    fn handle(&self, batch: &[Delivery]) -> BatchVerdict {
        self.runtime.block_on(self.write(batch))
    }
}

impl OrderWriter {
    async fn write(&self, batch: &[Delivery]) -> BatchVerdict {
        let started = Instant::now();
        let span = tracing::info_span!("consume_batch", size = batch.len());
        if let Some(traceparent) = batch.iter().find_map(|d| d.traceparent.as_deref()) {
            platform::telemetry::adopt_traceparent(&span, traceparent);
        }
        let _entered = span.enter();
        metrics::histogram!("seckill_consumer_batch_size").record(batch.len() as f64);
        let redeliveries = batch.iter().filter(|d| d.reconsume_times > 0).count();
        metrics::counter!("seckill_consumer_redeliveries_total").increment(redeliveries as u64);

        let mut decoded = Vec::with_capacity(batch.len());
        for delivery in batch {
            match OrderPlaced::decode(&delivery.body) {
                Ok(order) => decoded.push((delivery, order)),
                Err(error) => {
                    if !self.reject(delivery, &error.to_string()).await {
                        return BatchVerdict::RetryLater;
                    }
                }
            }
        }
        let mut orders: Vec<OrderPlaced> = decoded.iter().map(|(_, o)| o.clone()).collect();

        let summary = match self.db.write_orders(&orders).await {
            Ok(summary) => summary,
            // Some order decodes but can never be stored (a quantity or time beyond what the
            // columns hold); the store checks before writing anything. Written one by one,
            // only those are rejected instead of holding the whole batch back until the DLQ.
            Err(StoreError::InvalidData(_)) => match self.write_one_by_one(decoded).await {
                Some((summary, written)) => {
                    orders = written;
                    summary
                }
                None => return BatchVerdict::RetryLater,
            },
            Err(error) => {
                refused(&error);
                return BatchVerdict::RetryLater;
            }
        };
        metrics::counter!("seckill_orders_written_total").increment(summary.inserted as u64);
        metrics::counter!("seckill_orders_duplicate_total").increment(summary.duplicates as u64);

        let tokens: Vec<_> = orders.iter().map(|o| o.order_token.clone()).collect();
        if let Err(error) = self.cache.mark_confirmed(&tokens).await {
            // The orders are safe in MySQL; status polling falls back to it. No retry.
            tracing::warn!(error = ?error, "Orders written but not marked confirmed in Redis.");
        }
        metrics::histogram!("seckill_consumer_batch_seconds")
            .record(started.elapsed().as_secs_f64());
        tracing::info!(
            inserted = summary.inserted,
            duplicates = summary.duplicates,
            "Order batch written."
        );
        BatchVerdict::Done
    }

    /// Records a message that can never be written; false when even that failed (the
    /// batch then goes back, so the message is not lost).
    async fn reject(&self, delivery: &Delivery, reason: &str) -> bool {
        if let Err(db_error) = self
            .db
            .record_rejected_message(&delivery.msg_id, reason, &delivery.body)
            .await
        {
            tracing::warn!(msg_id = %delivery.msg_id, error = ?db_error, "Cannot record a rejected message; retrying the batch.");
            return false;
        }
        metrics::counter!("seckill_consumer_rejected_total").increment(1);
        tracing::error!(msg_id = %delivery.msg_id, reason, "Rejected a message that is not an order.");
        true
    }

    /// One transaction per order: those the store refuses as invalid are rejected, the rest
    /// written. `None` when any other failure hands the batch back (what was written stays;
    /// redelivery skips it).
    async fn write_one_by_one(
        &self,
        decoded: Vec<(&Delivery, OrderPlaced)>,
    ) -> Option<(WriteSummary, Vec<OrderPlaced>)> {
        let mut summary = WriteSummary::default();
        let mut written = Vec::with_capacity(decoded.len());
        for (delivery, order) in decoded {
            match self.db.write_orders(std::slice::from_ref(&order)).await {
                Ok(one) => {
                    summary.inserted += one.inserted;
                    summary.duplicates += one.duplicates;
                    written.push(order);
                }
                Err(StoreError::InvalidData(reason)) => {
                    if !self.reject(delivery, &reason).await {
                        return None;
                    }
                }
                Err(error) => {
                    refused(&error);
                    return None;
                }
            }
        }
        Some((summary, written))
    }
}

fn refused(error: &StoreError) {
    let retryable = error.is_retryable();
    if retryable {
        tracing::warn!(error = ?error, "Batch not written; the broker will redeliver it.");
    } else {
        // Stock in MySQL disagrees with Redis: a person must look. The batch goes back and,
        // after its retries, to the DLQ, where reconcile finds it.
        tracing::error!(error = ?error, "Batch refused by MySQL; it will be retried and then dead-lettered.");
    }
    metrics::counter!("seckill_consumer_batch_failures_total", "retryable" => retryable.to_string())
        .increment(1);
}
