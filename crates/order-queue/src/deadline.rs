//! Payment deadlines carried by the broker: an order written to MySQL must be paid by its
//! `pay_by`, and the process that wrote it may crash long before then. So the deadline is a
//! message the broker holds and delivers when it falls due: a **timer message** (property
//! `TIMER_DELIVER_MS`), which rocketmq-rust keeps in its timer store
//! (`timerWheelEnable`, on by default) and puts back on the deadline topic at that time.
//!
//! What the rocketmq-rust broker does with one:
//! - it files the delivery time under the timer tick (`timerPrecisionMs`, 1 s by default)
//!   before it and puts the message back on the topic one tick after that, so it arrives
//!   after its time, late by under a tick plus the time that move and the pull take —
//!   "within seconds after pay_by";
//! - a delivery time that is not in the broker's future is refused outright, so a deadline
//!   already past is sent as a plain message, delivered at once;
//! - the timer store is on disk: a pending deadline survives the broker being killed and
//!   restarted, and those that fell due meanwhile are delivered right after the restart;
//! - like every message, it may be delivered more than once (retries, a restart before the
//!   consumer's offset was persisted): expiring an order must be idempotent.
//!
//! Delay levels ("1s 5s 10s 30s 1m …") work on this broker too, but round the deadline to a
//! level; the timer keeps the exact time, so it is what this module uses.
//!
//! [`DeadlinePublisher::schedule`] sends one [`Deadline`] per batch of orders written together;
//! [`DeadlineSubscriber`] hands each one, when due, to a [`DeadlineHandler`] (in the order
//! consumer: expire the orders still unpaid), whose [`Due`] says whether it is finished.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use domain::{MAX_ORDERS_PER_MESSAGE, OrderToken, ProductId};
use rocketmq_client_rust::{
    ClientResult, ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, DefaultMQProducer,
    DefaultMQPushConsumer, MessageListenerConcurrently,
};
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_single::Message;
use serde::{Deserialize, Serialize};
use tokio::runtime::Handle;
use tokio::sync::RwLock;
use tracing::{debug, error, warn};

use crate::consumer::{
    PushConsumerSpec, Verdict, consume_guarded, start_push_consumer, stop_push_consumer,
};
use crate::publisher::{send_plain, start_plain_producer};
use crate::topic::ensure_named_topic;
use crate::{Delivery, MqError, MqRuntime, MqSettings, Result};

/// The version of [`Deadline`] this code writes and reads.
pub const DEADLINE_VERSION: u8 = 1;

/// The tag of deadline messages.
pub const DEADLINE_TAG: &str = "deadline";

/// A deadline this close (or closer) is sent for `now + MIN_TIMER_LEAD_MS` instead. The
/// broker refuses a delivery time that is not in its own future, and its clock may trail
/// ours a little; a second also matches the timer's default precision, so nothing sooner
/// would be delivered any sooner.
const MIN_TIMER_LEAD_MS: i64 = 1_000;

/// A body larger than this is not a deadline: tokens are under 60 characters each.
const MAX_BODY_LEN: usize = 64 * MAX_ORDERS_PER_MESSAGE + 256;

/// The deadline message's body: the orders of one product that must be paid by `pay_by_ms`.
/// JSON with a version field, like `domain::OrderPlaced`, so that a receiver refuses what it
/// does not understand instead of guessing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deadline {
    pub v: u8,
    pub product_id: ProductId,
    /// At least one, at most `MAX_ORDERS_PER_MESSAGE`, all of `product_id`.
    pub order_tokens: Vec<OrderToken>,
    /// Unix milliseconds; the latest `pay_by` of the orders, so that none is early.
    pub pay_by_ms: i64,
}

/// Why a body is not a [`Deadline`].
#[derive(Debug, thiserror::Error)]
pub enum DeadlineDecodeError {
    #[error("the body is {0} bytes, more than a deadline can be")]
    TooLarge(usize),
    #[error("the body is not a Deadline: {0}")]
    Json(#[from] serde_json::Error),
    #[error("deadline version {0} is not understood")]
    UnknownVersion(u8),
    #[error("the deadline names no order")]
    NoOrders,
    #[error("the deadline names {0} orders, more than {MAX_ORDERS_PER_MESSAGE}")]
    TooManyOrders(usize),
    #[error("order token {} is not of product {product}", token.short())]
    ProductMismatch {
        token: OrderToken,
        product: ProductId,
    },
}

impl Deadline {
    pub fn new(product_id: ProductId, order_tokens: Vec<OrderToken>, pay_by_ms: i64) -> Self {
        Self {
            v: DEADLINE_VERSION,
            product_id,
            order_tokens,
            pay_by_ms,
        }
    }

    /// The deadlines of one product's orders that share `pay_by_ms`: as few as carry them
    /// all, each naming at most `MAX_ORDERS_PER_MESSAGE` (a consumer batch can hold many
    /// times that of one product when the crowd packs its messages full).
    pub fn for_orders(
        product_id: ProductId,
        order_tokens: &[OrderToken],
        pay_by_ms: i64,
    ) -> Vec<Self> {
        order_tokens
            .chunks(MAX_ORDERS_PER_MESSAGE)
            .map(|tokens| Self::new(product_id, tokens.to_vec(), pay_by_ms))
            .collect()
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("Deadline always serialises")
    }

    /// Decodes and validates a body.
    pub fn decode(body: &[u8]) -> Result<Self, DeadlineDecodeError> {
        if body.len() > MAX_BODY_LEN {
            return Err(DeadlineDecodeError::TooLarge(body.len()));
        }
        let deadline: Self = serde_json::from_slice(body)?;
        deadline.validate()?;
        Ok(deadline)
    }

    fn validate(&self) -> Result<(), DeadlineDecodeError> {
        if self.v != DEADLINE_VERSION {
            return Err(DeadlineDecodeError::UnknownVersion(self.v));
        }
        match self.order_tokens.len() {
            0 => return Err(DeadlineDecodeError::NoOrders),
            n if n > MAX_ORDERS_PER_MESSAGE => return Err(DeadlineDecodeError::TooManyOrders(n)),
            _ => {}
        }
        if let Some(token) = self
            .order_tokens
            .iter()
            .find(|token| token.product_id() != self.product_id)
        {
            return Err(DeadlineDecodeError::ProductMismatch {
                token: token.clone(),
                product: self.product_id,
            });
        }
        Ok(())
    }
}

/// When the broker should deliver a deadline sent at `now_ms`: `None` for at once.
fn deliver_at_ms(pay_by_ms: i64, now_ms: i64) -> Option<i64> {
    (pay_by_ms > now_ms).then(|| pay_by_ms.max(now_ms.saturating_add(MIN_TIMER_LEAD_MS)))
}

/// The message for `deadline` sent at `now_ms`: keys = the order tokens (so that
/// `queryMsgByKey` finds an order's deadline), body = the JSON, and the timer property unless
/// the deadline is already past.
fn deadline_message(topic: &str, deadline: &Deadline, now_ms: i64) -> Result<Message> {
    deadline
        .validate()
        .map_err(|error| MqError::InvalidMessage(error.to_string()))?;
    let keys = deadline
        .order_tokens
        .iter()
        .map(ToString::to_string)
        .collect();
    let mut builder = Message::builder()
        .topic(topic)
        .tags(DEADLINE_TAG)
        .keys(keys)
        .body(deadline.encode());
    if let Some(at) = deliver_at_ms(deadline.pay_by_ms, now_ms) {
        // Positive: it lies after `now_ms`, which is after 1970.
        builder = builder.deliver_time_ms(at.unsigned_abs());
    }
    builder
        .build()
        .map_err(|error| MqError::InvalidMessage(error.to_string()))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Schedules deadlines. Cheap to clone and share; every method takes `&self`.
#[derive(Clone)]
pub struct DeadlinePublisher {
    sender: Arc<dyn Sender>,
}

/// The producer behind a [`DeadlinePublisher`], as a trait object, for the reason given at
/// `publisher::Producers`: the client's deeply nested types are proved `Send + Sync` once,
/// here, rather than in every crate that shares a publisher.
trait Sender: Send + Sync {
    fn topic(&self) -> &str;
    fn schedule<'a>(&'a self, deadline: &'a Deadline) -> BoxFuture<'a, Result<()>>;
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

struct PlainSender {
    topic: String,
    /// `None` once shut down. Sends hold the read lock, so shutdown waits for them.
    producer: RwLock<Option<DefaultMQProducer>>,
}

impl std::fmt::Debug for DeadlinePublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadlinePublisher")
            .field("topic", &self.sender.topic())
            .finish_non_exhaustive()
    }
}

impl DeadlinePublisher {
    /// Creates `settings.deadline_topic` if it does not exist yet (as [`crate::ensure_topic`]
    /// does the order topic), then starts a plain producer in group
    /// `<producer_group>-deadline` — one such publisher per [`MqRuntime`].
    pub async fn start(runtime: &MqRuntime, settings: &MqSettings) -> Result<Self> {
        ensure_named_topic(runtime, settings, &settings.deadline_topic).await?;
        let producer = start_plain_producer(
            runtime.client(),
            &format!("{}-deadline", settings.producer_group),
            settings,
            &settings.deadline_topic,
        )
        .await?;
        Ok(Self {
            sender: Arc::new(PlainSender {
                topic: settings.deadline_topic.clone(),
                producer: RwLock::new(Some(producer)),
            }),
        })
    }

    /// Hands `deadline` to the broker, to be delivered to the deadline consumer group at
    /// `pay_by_ms` (at once when that is past, at least a second ahead when it is closer).
    /// `Ok` means the broker stored it: from then on it survives this process, and a broker
    /// restart. `Err` means it is **not known to be stored**: the caller schedules it again
    /// (a deadline delivered twice is harmless). A `pay_by_ms` beyond the broker's
    /// `timerMaxDelaySec` (3 days by default) is refused as [`MqError::Send`].
    pub async fn schedule(&self, deadline: &Deadline) -> Result<()> {
        self.sender.schedule(deadline).await
    }

    /// Waits for sends in flight, then stops the producer; later calls fail with
    /// [`MqError::ShutDown`]. Deadlines already scheduled are the broker's. Idempotent.
    pub async fn shutdown(&self) {
        self.sender.shutdown().await;
    }
}

impl Sender for PlainSender {
    fn topic(&self) -> &str {
        &self.topic
    }

    fn schedule<'a>(&'a self, deadline: &'a Deadline) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let message = deadline_message(&self.topic, deadline, now_ms())?;
            let guard = self.producer.read().await;
            let producer = guard.as_ref().ok_or(MqError::ShutDown)?;
            let result = send_plain(producer, message).await?;
            debug!(
                order_token = %deadline.order_tokens[0].short(),
                orders = deadline.order_tokens.len(),
                pay_by_ms = deadline.pay_by_ms,
                msg_id = ?result.msg_id,
                "Deadline scheduled."
            );
            Ok(())
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(mut producer) = self.producer.write().await.take() {
                producer.shutdown().await;
            }
        })
    }
}

/// What became of a deadline handed to a [`DeadlineHandler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Handled (the orders expired, or were paid meanwhile): the broker forgets it.
    Done,
    /// Deliver it again later — the broker's retry backoff: 10 s, 30 s, 1 min, 2 min, …
    /// After `DeadlineTuning::max_reconsume_times` redeliveries it goes to the group's
    /// dead-letter queue (`%DLQ%<deadline_consumer_group>`), so something else (reconcile)
    /// must still find orders left unpaid past their time.
    RetryLater,
}

impl Verdict for Due {
    fn retry_later() -> Self {
        Self::RetryLater
    }

    fn is_done(&self) -> bool {
        *self == Self::Done
    }
}

/// Handles a deadline that fell due. Any `Fn(Deadline) -> impl Future<Output = Due>` closure
/// is one.
///
/// The future runs on the Tokio runtime that called [`DeadlineSubscriber::start`], one per
/// deadline, several at once (`DeadlineTuning::consume_threads`); keep it well under 30 s,
/// after which the client stops waiting and the deadline is delivered again. A panic counts
/// as [`Due::RetryLater`]. Deliveries may repeat, and one may in principle come a moment
/// before `pay_by_ms` (the broker only promises the timer tick before it): an order not yet
/// due is a reason for `RetryLater`, never for expiring it.
pub trait DeadlineHandler: Send + Sync + 'static {
    fn handle(&self, deadline: Deadline) -> BoxFuture<'static, Due>;
}

impl<F, Fut> DeadlineHandler for F
where
    F: Fn(Deadline) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Due> + Send + 'static,
{
    fn handle(&self, deadline: Deadline) -> BoxFuture<'static, Due> {
        Box::pin(self(deadline))
    }
}

/// How the deadline consumer works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlineTuning {
    /// Most deadlines handled at once.
    pub consume_threads: u32,
    /// Redeliveries after [`Due::RetryLater`] before a deadline goes to the dead-letter queue.
    pub max_reconsume_times: i32,
}

impl Default for DeadlineTuning {
    /// Four at once; 16 redeliveries, the broker's backoff then spans about four and a half
    /// hours — a MySQL outage that long is a case for reconcile.
    fn default() -> Self {
        Self {
            consume_threads: 4,
            max_reconsume_times: 16,
        }
    }
}

/// Each pull may fetch this many deadlines; they are handled one by one regardless, so that
/// one answering `RetryLater` does not send others back with it.
const DEADLINE_PULL_BATCH: u32 = 32;

/// A running deadline consumer; [`DeadlineSubscriber::shutdown`] stops it.
pub struct DeadlineSubscriber {
    consumer: DefaultMQPushConsumer,
    group: String,
}

impl std::fmt::Debug for DeadlineSubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadlineSubscriber")
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl DeadlineSubscriber {
    /// Creates `settings.deadline_topic` if need be, joins `settings.deadline_consumer_group`
    /// (clustering: each deadline goes to one member) and starts receiving. `handler`'s
    /// futures run on the runtime this is called from.
    ///
    /// A body that is not a deadline is logged and dropped: no retry could make it one. One
    /// of a newer version is sent back for retry instead, for a newer replica of the group
    /// (in a rolling upgrade) to take.
    pub async fn start(
        runtime: &MqRuntime,
        settings: &MqSettings,
        tuning: DeadlineTuning,
        handler: impl DeadlineHandler,
    ) -> Result<Self> {
        ensure_named_topic(runtime, settings, &settings.deadline_topic).await?;
        let spec = PushConsumerSpec {
            settings,
            group: &settings.deadline_consumer_group,
            topic: &settings.deadline_topic,
            tag_expression: DEADLINE_TAG,
            batch_size: 1,
            pull_batch_size: DEADLINE_PULL_BATCH,
            consume_threads: tuning.consume_threads,
            max_reconsume_times: tuning.max_reconsume_times,
        };
        let listener = DeadlineListener {
            handler: Arc::new(handler),
            runtime: Handle::current(),
        };
        let consumer = start_push_consumer(runtime, &spec, listener).await?;
        Ok(Self {
            consumer,
            group: settings.deadline_consumer_group.clone(),
        })
    }

    /// Stops the consumer as [`crate::OrderSubscriber::shutdown`] does: a deadline being
    /// handled gets up to 30 s to finish; the others stay with the broker for the group.
    pub async fn shutdown(mut self) {
        stop_push_consumer(&mut self.consumer, &self.group).await;
    }
}

struct DeadlineListener {
    handler: Arc<dyn DeadlineHandler>,
    /// The caller's runtime, which the handler's futures run on.
    runtime: Handle,
}

impl DeadlineListener {
    fn handle(&self, delivery: &Delivery) -> Due {
        match Deadline::decode(&delivery.body) {
            Ok(deadline) => {
                let task = self.runtime.spawn(self.handler.handle(deadline));
                // Runs on the client's blocking pool, outside any async context, where
                // blocking on the caller's runtime is allowed.
                self.runtime.block_on(task).unwrap_or_else(|error| {
                    error!(msg_id = %delivery.msg_id, %error, "Deadline handler failed; the deadline will be redelivered.");
                    Due::RetryLater
                })
            }
            Err(DeadlineDecodeError::UnknownVersion(v)) => {
                warn!(msg_id = %delivery.msg_id, v, "Deadline of a version this replica does not understand; sent back for another.");
                Due::RetryLater
            }
            Err(error) => {
                // Neither body nor keys are logged: they may hold whole order tokens.
                error!(msg_id = %delivery.msg_id, body_len = delivery.body.len(), %error, "Deadline message is malformed; dropped.");
                Due::Done
            }
        }
    }
}

impl MessageListenerConcurrently for DeadlineListener {
    fn consume_message(
        &self,
        messages: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        let deliveries: Vec<Delivery> = messages.iter().map(|m| Delivery::from_ext(m)).collect();
        // One deadline per call (batch size 1); should the client pass more, one retry sends
        // them all back, which is harmless.
        Ok(consume_guarded(&deliveries, || {
            deliveries
                .iter()
                .map(|delivery| self.handle(delivery))
                .fold(Due::Done, |all, due| if due.is_done() { all } else { due })
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use rocketmq_model::common::message::message_queue::MessageQueue;

    use super::*;

    fn tokens(product: u64, n: u128) -> Vec<OrderToken> {
        (1..=n)
            .map(|nonce| OrderToken::new(ProductId(product), nonce))
            .collect()
    }

    fn deadline() -> Deadline {
        Deadline::new(ProductId(7), tokens(7, 3), 1_700_000_900_000)
    }

    #[test]
    fn more_orders_than_a_deadline_names_are_shared_out_over_several_each_named_once() {
        let orders = tokens(7, 600);
        let deadlines = Deadline::for_orders(ProductId(7), &orders, 1_700_000_900_000);
        let sizes: Vec<usize> = deadlines.iter().map(|d| d.order_tokens.len()).collect();
        assert_eq!(sizes, [256, 256, 88]);
        let named: Vec<OrderToken> = deadlines
            .iter()
            .flat_map(|d| d.order_tokens.iter().cloned())
            .collect();
        assert_eq!(named, orders);
        for deadline in &deadlines {
            assert_eq!(Deadline::decode(&deadline.encode()).unwrap(), *deadline);
        }
    }

    #[test]
    fn a_deadline_survives_the_round_trip_through_json() {
        assert_eq!(Deadline::decode(&deadline().encode()).unwrap(), deadline());
    }

    #[test]
    fn a_deadline_of_another_version_or_mixed_products_or_no_orders_does_not_decode() {
        let mut newer = deadline();
        newer.v = 2;
        assert!(matches!(
            Deadline::decode(&newer.encode()),
            Err(DeadlineDecodeError::UnknownVersion(2))
        ));
        let mut mixed = deadline();
        mixed.order_tokens.push(OrderToken::new(ProductId(8), 1));
        assert!(matches!(
            Deadline::decode(&mixed.encode()),
            Err(DeadlineDecodeError::ProductMismatch { .. })
        ));
        let empty = Deadline::new(ProductId(7), Vec::new(), 1);
        assert!(matches!(
            Deadline::decode(&empty.encode()),
            Err(DeadlineDecodeError::NoOrders)
        ));
        assert!(Deadline::decode(b"not json").is_err());
        assert!(
            Deadline::decode(br#"{"v":1,"product_id":7,"order_tokens":[],"pay_by_ms":1,"x":1}"#)
                .is_err()
        );
    }

    #[test]
    fn a_future_deadline_is_delivered_at_pay_by_a_past_one_at_once_a_close_one_a_second_ahead() {
        let now = 1_700_000_000_000;
        assert_eq!(deliver_at_ms(now + 900_000, now), Some(now + 900_000));
        assert_eq!(deliver_at_ms(now, now), None);
        assert_eq!(deliver_at_ms(now - 5, now), None);
        assert_eq!(deliver_at_ms(now + 200, now), Some(now + MIN_TIMER_LEAD_MS));
    }

    #[test]
    fn the_message_names_every_order_and_carries_the_timer_only_when_in_the_future() {
        let now = deadline().pay_by_ms - 60_000;
        let message = deadline_message("t", &deadline(), now).unwrap();
        assert_eq!(message.tags(), Some(DEADLINE_TAG));
        assert_eq!(
            crate::message::order_tokens_of(&message),
            deadline().order_tokens
        );
        assert_eq!(Deadline::decode(message.body_slice()).unwrap(), deadline());
        let timer = message
            .property(rocketmq_model::common::message::MessageConst::PROPERTY_TIMER_DELIVER_MS);
        assert_eq!(timer, Some(deadline().pay_by_ms.to_string().as_str()));

        let late = deadline_message("t", &deadline(), deadline().pay_by_ms + 1).unwrap();
        assert_eq!(
            late.property(rocketmq_model::common::message::MessageConst::PROPERTY_TIMER_DELIVER_MS),
            None
        );
    }

    #[test]
    fn a_deadline_that_would_not_decode_is_not_sent() {
        let mixed = Deadline::new(ProductId(7), tokens(8, 1), 1);
        assert!(matches!(
            deadline_message("t", &mixed, 0),
            Err(MqError::InvalidMessage(_))
        ));
    }

    /// Runs the listener on one message with `body`; the handler answers `due` (or panics)
    /// and records what it got.
    fn consume(body: Vec<u8>, due: Option<Due>) -> (ConsumeConcurrentlyStatus, Vec<Deadline>) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&seen);
        let handler = move |deadline: Deadline| {
            recorded.lock().unwrap().push(deadline);
            async move { due.expect("told to panic") }
        };
        let listener = DeadlineListener {
            handler: Arc::new(handler),
            runtime: runtime.handle().clone(),
        };
        let message = MessageExt {
            message: Message::builder().topic("t").body(body).build().unwrap(),
            ..MessageExt::default()
        };
        let context = ConsumeConcurrentlyContext::new(MessageQueue::from_parts("t", "b", 0));
        let status = listener.consume_message(&[&message], &context).unwrap();
        let seen = seen.lock().unwrap().clone();
        (status, seen)
    }

    #[test]
    fn the_handlers_answer_becomes_the_consume_status() {
        let (status, seen) = consume(deadline().encode(), Some(Due::Done));
        assert_eq!(status, ConsumeConcurrentlyStatus::ConsumeSuccess);
        assert_eq!(seen, vec![deadline()]);
        let (status, _) = consume(deadline().encode(), Some(Due::RetryLater));
        assert_eq!(status, ConsumeConcurrentlyStatus::ReconsumeLater);
    }

    #[test]
    fn a_panicking_handler_means_retry_later() {
        let (status, seen) = consume(deadline().encode(), None);
        assert_eq!(status, ConsumeConcurrentlyStatus::ReconsumeLater);
        assert_eq!(seen.len(), 1);
    }

    #[test]
    fn a_malformed_body_is_dropped_without_reaching_the_handler() {
        let (status, seen) = consume(b"{\"v\":1,\"garbage\"".to_vec(), Some(Due::RetryLater));
        assert_eq!(status, ConsumeConcurrentlyStatus::ConsumeSuccess);
        assert!(seen.is_empty());
    }

    #[test]
    fn a_deadline_of_a_newer_version_is_sent_back_for_another_replica() {
        let mut newer = deadline();
        newer.v = DEADLINE_VERSION + 1;
        let (status, seen) = consume(newer.encode(), Some(Due::Done));
        assert_eq!(status, ConsumeConcurrentlyStatus::ReconsumeLater);
        assert!(seen.is_empty());
    }
}
