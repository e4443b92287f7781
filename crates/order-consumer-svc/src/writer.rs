//! One batch of order messages → one MySQL transaction → "confirmed" in Redis.
//!
//! Failure policy: a message that can never succeed (undecodable, wrong version, values the
//! store cannot hold) is recorded in `rejected_message` and acknowledged; an order MySQL
//! refuses as it stands (its stock is short of what Redis sold, or the product has no stock
//! row) is recorded in `unwritable_order`, unresolved, and the rest of its batch is written
//! and acknowledged — retrying could not change it, and the innocent orders that share its
//! batch would wait in the broker's retries and the DLQ with it. Anything that may pass
//! (MySQL or Redis down, a lock timeout) hands the whole batch back to the broker, which
//! redelivers it after its backoff — the write is idempotent, so redelivery is harmless.
//!
//! Traces: the batch's span (`consume_batch`) is a child of the first message's trace and
//! links to the others; it holds the MySQL transactions (`db.write_orders`, at most
//! `consumer.batch_size` orders each) and the Redis confirmation. While traces are
//! exported, each order also gets a `consume_order` span in its own purchase's trace, open
//! while its batch is written and linked to the batch, so every purchase's trace shows the
//! consumer, whichever batch carried it.

use std::time::Instant;

use std::collections::BTreeMap;
use std::sync::Arc;

use domain::{OrderPlaced, OrderToken, ProductId};
use order_queue::{BatchHandler, BatchVerdict, Deadline, DeadlinePublisher, Delivery};
use order_store::{Db, StoreError, WriteSummary};
use platform::telemetry;
use stock_cache::StockCache;
use tokio::runtime::Handle;
use tracing::Instrument;

use crate::backlog::OrdersPerMessage;

pub struct OrderWriter {
    db: Db,
    cache: StockCache,
    /// At most this many orders in one MySQL transaction (the consumer's `batch_size`): a
    /// batch of messages that carry several orders each is written in several.
    orders_per_transaction: usize,
    /// The client calls `handle` on its own blocking threads; the async work runs here.
    runtime: Handle,
    /// The consumer group's `max_reconsume_times`: a message handed back at this count goes
    /// to the DLQ instead of another retry, which is counted.
    max_reconsume_times: i32,
    /// How long a written order waits for its payment (`orders.payment_window_secs`).
    payment_window: chrono::Duration,
    /// Where each written batch's deadline is sent; none in tests of the write alone.
    deadlines: Option<DeadlinePublisher>,
    /// Told each batch's orders per message, for the backlog in orders.
    per_message: Arc<OrdersPerMessage>,
}

impl BatchHandler for OrderWriter {
    fn handle(&self, batch: &[Delivery]) -> BatchVerdict {
        let span = batch_span(batch);
        let verdict = self
            .runtime
            .block_on(self.write(batch).instrument(span.clone()));
        if verdict == BatchVerdict::RetryLater {
            span.record("verdict", "retry_later");
            span.record("otel.status_code", "ERROR");
            span.in_scope(|| self.handed_back(batch));
        } else {
            span.record("verdict", "done");
        }
        verdict
    }
}

/// `consume_batch`: a child of the first message's trace, linked to every other one.
fn batch_span(batch: &[Delivery]) -> tracing::Span {
    let span = tracing::info_span!(
        "consume_batch",
        otel.kind = "consumer",
        messaging.system = "rocketmq",
        size = batch.len(),
        verdict = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let mut traceparents = batch.iter().filter_map(|d| d.traceparent.as_deref());
    if let Some(first) = traceparents.next() {
        telemetry::adopt_traceparent(&span, first);
    }
    // Links are seen only in exported traces; a batch can have hundreds.
    if !telemetry::exporting() {
        return span;
    }
    for other in traceparents {
        telemetry::link_traceparent(&span, other);
    }
    span
}

impl OrderWriter {
    pub fn new(
        db: Db,
        cache: StockCache,
        orders_per_transaction: usize,
        runtime: Handle,
        max_reconsume_times: i32,
    ) -> Self {
        Self {
            db,
            cache,
            orders_per_transaction: orders_per_transaction.max(1),
            runtime,
            max_reconsume_times,
            payment_window: chrono::Duration::from_std(order_store::DEFAULT_PAYMENT_WINDOW)
                .expect("the default window is a few minutes"),
            deadlines: None,
            per_message: Arc::default(),
        }
    }

    /// Each batch from now on tells `per_message` how many orders its messages carried.
    pub fn counting_orders_per_message(mut self, per_message: Arc<OrdersPerMessage>) -> Self {
        self.per_message = per_message;
        self
    }

    /// Each batch written from now on schedules its payment deadline with `publisher`.
    pub fn scheduling_deadlines(mut self, publisher: DeadlinePublisher) -> Self {
        self.deadlines = Some(publisher);
        self
    }

    /// Orders written from now on wait `window` for their payment.
    pub fn with_payment_window(mut self, window: std::time::Duration) -> Self {
        self.payment_window = chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
        self
    }

    /// The batch goes back to the broker: messages at their last retry go to the DLQ.
    fn handed_back(&self, batch: &[Delivery]) {
        let last_tries: Vec<&str> = batch
            .iter()
            .filter(|d| d.reconsume_times >= self.max_reconsume_times)
            .map(|d| d.msg_id.as_str())
            .collect();
        if last_tries.is_empty() {
            return;
        }
        metrics::counter!("seckill_consumer_dead_lettered_total")
            .increment(last_tries.len() as u64);
        tracing::error!(
            count = last_tries.len(),
            msg_ids = ?last_tries,
            "Messages out of retries go to the dead-letter queue; reconcile will find their flows."
        );
    }

    async fn write(&self, batch: &[Delivery]) -> BatchVerdict {
        let started = Instant::now();
        metrics::histogram!("seckill_consumer_batch_size").record(batch.len() as f64);
        let redeliveries = batch.iter().filter(|d| d.reconsume_times > 0).count();
        metrics::counter!("seckill_consumer_redeliveries_total").increment(redeliveries as u64);

        let mut decoded = Vec::with_capacity(batch.len());
        for delivery in batch {
            match OrderPlaced::decode_all(&delivery.body) {
                Ok(orders) => decoded.extend(orders.into_iter().map(|order| (delivery, order))),
                Err(error) => {
                    if !self.reject(delivery, &error.to_string()).await {
                        return BatchVerdict::RetryLater;
                    }
                }
            }
        }
        self.per_message.observe(batch.len(), decoded.len());
        // Open until the batch is written (or not): each purchase's trace shows its wait.
        // Made only while traces are exported: nobody else sees them, and they cost per order.
        let order_spans = if telemetry::exporting() {
            order_spans(&decoded)
        } else {
            Vec::new()
        };

        platform::crash_point!("consumer::before_commit");
        // One deadline for the batch: its orders are written within moments of each other.
        let pay_by = chrono::Utc::now() + self.payment_window;
        let mut summary = WriteSummary::default();
        let mut orders = Vec::with_capacity(decoded.len());
        // A failure after some transactions committed hands the whole batch back: the
        // redelivery finds those orders written and skips them.
        for chunk in decoded.chunks(self.orders_per_transaction) {
            let Some((written, chunk_orders)) = self.write_chunk(chunk, pay_by).await else {
                return BatchVerdict::RetryLater;
            };
            summary.absorb(written);
            orders.extend(chunk_orders);
        }
        platform::crash_point!("consumer::after_commit");
        metrics::counter!("seckill_orders_written_total").increment(summary.inserted as u64);
        metrics::counter!("seckill_orders_duplicate_total").increment(summary.duplicates as u64);
        let now = chrono::Utc::now();
        // One registry look-up per batch, not per order.
        let order_age = metrics::histogram!("seckill_consumer_order_age_seconds");
        for order in &orders {
            let age_ms = (now.timestamp_millis() - order.reserved_at_ms).max(0);
            order_age.record(age_ms as f64 / 1e3);
        }

        let pay_by_ms = pay_by.timestamp_millis();
        // After the commit, so that a deadline never names an order MySQL may not have. A
        // crash before it is sent redelivers the batch: its orders are then found written,
        // and the deadline is sent for them all the same.
        if !self.schedule_deadlines(&orders, pay_by_ms).await {
            return BatchVerdict::RetryLater;
        }
        let confirmed: Vec<_> = orders
            .iter()
            .map(|o| (o.order_token.clone(), pay_by_ms))
            .collect();
        if let Err(error) = self.cache.mark_confirmed_until(&confirmed).await {
            // The orders are safe in MySQL; status polling falls back to it. No retry.
            tracing::warn!(error = ?error, "Orders written but not marked confirmed in Redis.");
        }
        drop(order_spans);
        metrics::histogram!("seckill_consumer_batch_seconds")
            .record(started.elapsed().as_secs_f64());
        metrics::gauge!("seckill_consumer_last_batch_timestamp_seconds")
            .set(now.timestamp_millis() as f64 / 1e3);
        tracing::info!(
            inserted = summary.inserted,
            duplicates = summary.duplicates,
            "Order batch written."
        );
        // `seckill_stock_left{store="mysql"}`: what the batch's own transactions left (the
        // last one's last), so the dashboard's MySQL line follows the sale to its end at no
        // extra query.
        for (product, units) in &summary.stock_left {
            platform::ops::record_stock(product.get(), "mysql", *units);
        }
        BatchVerdict::Done
    }

    /// One MySQL transaction; `None` when the batch must go back. The orders written come
    /// back with the summary.
    async fn write_chunk(
        &self,
        chunk: &[(&Delivery, OrderPlaced)],
        pay_by: chrono::DateTime<chrono::Utc>,
    ) -> Option<(WriteSummary, Vec<OrderPlaced>)> {
        let orders: Vec<OrderPlaced> = chunk.iter().map(|(_, o)| o.clone()).collect();
        match self
            .db
            .write_orders_due(&orders, pay_by)
            .instrument(db_span(orders.len()))
            .await
        {
            Ok(summary) => Some((summary, orders)),
            // Some order can never be written: it decodes but the store cannot hold it (a
            // quantity or time beyond what the columns hold), or MySQL refuses it (its stock
            // is short of what Redis sold, or it has no stock row). The whole transaction
            // rolled back. Written one by one, only those orders are set aside instead of
            // holding the whole batch back until the DLQ.
            Err(error) if matches!(error, StoreError::InvalidData(_)) || error.refuses_order() => {
                self.write_one_by_one(chunk, pay_by).await
            }
            Err(error) => {
                refused(&error);
                None
            }
        }
    }

    /// Sends the deadlines of the batch, per product (as few as carry its orders); false
    /// when one could not be sent.
    async fn schedule_deadlines(&self, orders: &[OrderPlaced], pay_by_ms: i64) -> bool {
        let Some(publisher) = &self.deadlines else {
            return true;
        };
        let mut by_product: BTreeMap<ProductId, Vec<OrderToken>> = BTreeMap::new();
        for order in orders {
            by_product
                .entry(order.order_token.product_id())
                .or_default()
                .push(order.order_token.clone());
        }
        let deadlines = by_product
            .iter()
            .flat_map(|(product, tokens)| Deadline::for_orders(*product, tokens, pay_by_ms));
        for deadline in deadlines {
            if let Err(error) = publisher.schedule(&deadline).await {
                metrics::counter!("seckill_deadlines_scheduled_total", "outcome" => "failed")
                    .increment(1);
                tracing::warn!(error = %error, "Deadline not sent; the batch goes back to the broker.");
                return false;
            }
            metrics::counter!("seckill_deadlines_scheduled_total", "outcome" => "sent")
                .increment(1);
        }
        true
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

    /// Records an order MySQL refuses for good as it stands; false when even that failed
    /// (the batch then goes back, so the order is not lost).
    async fn set_aside(
        &self,
        delivery: &Delivery,
        order: &OrderPlaced,
        error: &StoreError,
    ) -> bool {
        let reason = unwritable_reason(error);
        if let Err(db_error) = self
            .db
            .record_unwritable_order(order, &delivery.msg_id, &reason)
            .await
        {
            tracing::warn!(order = %order.order_token.short(), error = ?db_error, "Cannot record an order MySQL refused; retrying the batch.");
            return false;
        }
        metrics::counter!("seckill_consumer_unwritable_total").increment(1);
        tracing::error!(
            order = %order.order_token.short(),
            msg_id = %delivery.msg_id,
            reason,
            "MySQL refuses an order for good; it is recorded in unwritable_order for reconcile and a person, and the rest of its batch goes on."
        );
        true
    }

    /// One transaction per order: those the store refuses as invalid are rejected, those
    /// MySQL refuses are set aside, the rest written. `None` when any other failure hands
    /// the batch back (what was written stays; redelivery skips it).
    async fn write_one_by_one(
        &self,
        chunk: &[(&Delivery, OrderPlaced)],
        pay_by: chrono::DateTime<chrono::Utc>,
    ) -> Option<(WriteSummary, Vec<OrderPlaced>)> {
        let mut summary = WriteSummary::default();
        let mut written = Vec::with_capacity(chunk.len());
        for (delivery, order) in chunk {
            match self
                .db
                .write_orders_due(std::slice::from_ref(order), pay_by)
                .instrument(db_span(1))
                .await
            {
                Ok(one) => {
                    summary.absorb(one);
                    written.push(order.clone());
                }
                Err(StoreError::InvalidData(reason)) => {
                    if !self.reject(delivery, &reason).await {
                        return None;
                    }
                }
                Err(error) if error.refuses_order() => {
                    if !self.set_aside(delivery, order, &error).await {
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

/// `db.write_orders`: one MySQL transaction.
fn db_span(orders: usize) -> tracing::Span {
    tracing::info_span!(
        "db.write_orders",
        otel.kind = "client",
        db.system.name = "mysql",
        orders
    )
}

/// `consume_order` per order that names its trace, in that trace, linked to the batch.
fn order_spans(decoded: &[(&Delivery, OrderPlaced)]) -> Vec<tracing::Span> {
    let batch = tracing::Span::current();
    let batch_parent = telemetry::traceparent_of(&batch);
    decoded
        .iter()
        .filter_map(|(delivery, order)| {
            // An order that shared its message with others carries its own trace context.
            let traceparent = order
                .traceparent
                .as_deref()
                .or(delivery.traceparent.as_deref())?;
            let span = tracing::info_span!(
                parent: None,
                "consume_order",
                otel.kind = "consumer",
                order = %order.order_token.short(),
                reconsume_times = delivery.reconsume_times,
            );
            telemetry::adopt_traceparent(&span, traceparent);
            if let Some(batch_parent) = &batch_parent {
                telemetry::link_traceparent(&span, batch_parent);
            }
            telemetry::annotate(
                &span,
                telemetry::ORDER_TOKEN_ATTRIBUTE,
                order.order_token.to_string(),
            );
            Some(span)
        })
        .collect()
}

/// What `unwritable_order.reason` says of an order MySQL refuses.
fn unwritable_reason(error: &StoreError) -> String {
    match error {
        StoreError::InsufficientStock { .. } => {
            format!("stock exhausted in MySQL: {error} (Redis sold more units than MySQL holds)")
        }
        StoreError::UnknownProduct(_) => format!("unknown to MySQL: {error}"),
        other => other.to_string(),
    }
}

fn refused(error: &StoreError) {
    let retryable = error.is_retryable();
    if retryable {
        tracing::warn!(error = ?error, "Batch not written; the broker will redeliver it.");
    } else {
        // Not about one order (those are set aside): the schema or the server refuses the
        // statements themselves. A person must look; the batch goes back and, after its
        // retries, to the DLQ, where reconcile finds its flows.
        tracing::error!(error = ?error, "Batch refused by MySQL; it will be retried and then dead-lettered.");
    }
    metrics::counter!("seckill_consumer_batch_failures_total", "retryable" => retryable.to_string())
        .increment(1);
}
