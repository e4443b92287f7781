//! Sending orders: transactionally from the gateway, plainly from reconcile.
//!
//! A transactional send stores a half message, then runs [`LocalTransaction::execute`] on the
//! client's blocking pool and tells the broker the outcome with a one-way END_TRANSACTION.
//! That one-way call may be lost, and the local transaction may be `Unknown`; either way the
//! broker later asks a live member of the producer group ([`LocalTransaction::check`]) —
//! every `transactionCheckInterval` once the half message is older than
//! `transactionTimeout` — until it gets an answer, or gives up after `transactionCheckMax`
//! (15) checks and discards the half message (reconcile then finds the flow without an
//! order). The check-back is what makes the outcome reliable, so it must give the same answer
//! `execute` would have (both run confirm.lua in the gateway).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use domain::{OrderPlaced, OrderToken};
use rocketmq_client_rust::{
    ClientRuntime, DefaultMQProducer, LocalTransactionState, SendResult, SendStatus,
    TransactionListener, TransactionMQProducer,
};
use rocketmq_model::common::message::MessageTrait;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_single::Message;
use tokio::sync::RwLock;
use tracing::{debug, error, info};

use crate::message::{order_tokens_of, orders_message};
use crate::{MqError, MqRuntime, MqSettings, Result};

/// The outcome of a local transaction, as told to the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxDecision {
    /// Make the message visible to consumers.
    Commit,
    /// Discard the half message.
    Rollback,
    /// Undecided: the broker will ask [`LocalTransaction::check`] later.
    Unknown,
}

impl From<TxDecision> for LocalTransactionState {
    fn from(decision: TxDecision) -> Self {
        match decision {
            TxDecision::Commit => Self::CommitMessage,
            TxDecision::Rollback => Self::RollbackMessage,
            TxDecision::Unknown => Self::Unknown,
        }
    }
}

impl From<LocalTransactionState> for TxDecision {
    fn from(state: LocalTransactionState) -> Self {
        match state {
            LocalTransactionState::CommitMessage => Self::Commit,
            LocalTransactionState::RollbackMessage => Self::Rollback,
            LocalTransactionState::Unknown => Self::Unknown,
        }
    }
}

/// The local side of a transactional send. Both methods are called synchronously on the
/// client's blocking pool (see the crate docs): keep them short, block on async work with
/// `Handle::block_on` if needed. A panic counts as `Unknown`.
///
/// A message carries one order or several of one product, and its decision covers them all:
/// both methods get every order of the message (at least one).
pub trait LocalTransaction: Send + Sync + 'static {
    /// Runs right after the half message is stored, with the orders the message was sent
    /// with and the span it was sent under ([`OrderPublisher::send_in_transaction`]): the
    /// client hands both over beside the message, so nothing is decoded again and the local
    /// transaction's span joins the sender's trace on the client's own thread.
    fn execute(&self, orders: &[OrderPlaced], sent_under: &tracing::Span) -> TxDecision;
    /// The broker's check-back for a half message still undecided after the broker's
    /// transaction timeout; `order_tokens` come from the message keys. It may run on any
    /// replica of the producer group, long after `execute`, or while `execute` still runs.
    fn check(&self, order_tokens: &[OrderToken]) -> TxDecision;
}

/// What [`OrderPublisher::send_in_transaction`] hands the client beside the message (the
/// client's `arg`), for the local transaction: the orders as the sender holds them, and the
/// span they were sent under.
struct SentAlong {
    orders: Vec<OrderPlaced>,
    sent_under: tracing::Span,
}

/// Maps the client's listener calls onto a [`LocalTransaction`]. A message that is not one of
/// ours (undecodable body, no key that is an order token, orders of several products) can
/// never be confirmed: `Rollback`.
struct ListenerAdapter {
    local: Arc<dyn LocalTransaction>,
}

impl TransactionListener for ListenerAdapter {
    fn execute_local_transaction(
        &self,
        message: &dyn MessageTrait,
        arg: Option<&(dyn std::any::Any + Send + Sync)>,
    ) -> LocalTransactionState {
        // Every send of this crate hands its orders over; a message sent without them (by
        // another producer of the group) is read from its body.
        if let Some(sent) = arg.and_then(|arg| arg.downcast_ref::<SentAlong>()) {
            return self.execute(message, &sent.orders, &sent.sent_under);
        }
        let body = message.get_body().map_or(&[][..], |body| body.as_ref());
        match OrderPlaced::decode_all(body) {
            Ok(orders) => self.execute(message, &orders, &tracing::Span::none()),
            Err(error) => {
                error!(%error, topic = %message.topic(), "Half message body is not an order; rolling back.");
                LocalTransactionState::RollbackMessage
            }
        }
    }

    fn check_local_transaction(&self, message: &MessageExt) -> LocalTransactionState {
        let order_tokens = order_tokens_of(message);
        if order_tokens.is_empty() || !one_product(order_tokens.iter()) {
            error!(keys = ?message.get_keys(), msg_id = %message.msg_id(), "Check-back for a message whose keys are no order tokens of one product; rolling back.");
            return LocalTransactionState::RollbackMessage;
        }
        let decision = self.local.check(&order_tokens);
        debug!(order_token = %order_tokens[0], orders = order_tokens.len(), ?decision, "Transaction check-back answered.");
        decision.into()
    }
}

impl ListenerAdapter {
    /// The local transaction for a message's orders: at least one, all of one product.
    fn execute(
        &self,
        message: &dyn MessageTrait,
        orders: &[OrderPlaced],
        sent_under: &tracing::Span,
    ) -> LocalTransactionState {
        if orders.is_empty() || !one_product(orders.iter().map(|o| &o.order_token)) {
            error!(topic = %message.topic(), orders = orders.len(), "Half message holds no orders, or orders of several products; rolling back.");
            return LocalTransactionState::RollbackMessage;
        }
        self.local.execute(orders, sent_under).into()
    }
}

/// The plain producer for re-publishing, started on first use: the gateway never needs it.
enum PlainProducer {
    NotStarted,
    Running(DefaultMQProducer),
    ShutDown,
}

/// Concurrent check-backs per producer (the client's default is 1). Each occupies a
/// blocking-pool slot while it runs confirm.lua; several let a restarted gateway clear a
/// backlog of undecided messages quickly.
const CHECK_WORKERS: u32 = 8;

/// Sends order messages. Cheap to clone and share; every method takes `&self`.
#[derive(Clone)]
pub struct OrderPublisher {
    producers: Arc<dyn Producers>,
}

/// The producers behind an [`OrderPublisher`], as a trait object. The client's types nest
/// deeply (client instance, consumers, their queue maps), and a crate that holds a publisher
/// in something it shares between threads would otherwise prove them `Send + Sync` itself
/// and overflow the compiler's default recursion limit. Behind `dyn`, the proof is made once,
/// here, where the concrete type becomes the trait object.
trait Producers: Send + Sync {
    fn topic(&self) -> &str;
    fn send_in_transaction(
        &self,
        orders: Vec<OrderPlaced>,
        sent_under: tracing::Span,
    ) -> BoxFuture<'_, Result<TxDecision>>;
    fn publish<'a>(
        &'a self,
        orders: &'a [OrderPlaced],
        traceparent: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>>;
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

struct Inner {
    topic: String,
    tag: String,
    settings: MqSettings,
    /// Group of the plain producer: a producer group can be registered once per client
    /// instance, and check-backs must never be routed to a producer without the listener.
    plain_group: String,
    client: Arc<ClientRuntime>,
    /// `None` once shut down. Sends hold the read lock, so shutdown waits for them.
    transactional: RwLock<Option<TransactionMQProducer>>,
    plain: RwLock<PlainProducer>,
}

impl std::fmt::Debug for OrderPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderPublisher")
            .field("topic", &self.producers.topic())
            .finish_non_exhaustive()
    }
}

impl OrderPublisher {
    /// Starts the transactional producer in `settings.producer_group`. From now on this
    /// process answers the broker's check-backs for that group through `local`.
    pub async fn start(
        runtime: &MqRuntime,
        settings: &MqSettings,
        local: Arc<dyn LocalTransaction>,
    ) -> Result<Self> {
        let started = Instant::now();
        let mut builder = TransactionMQProducer::builder(runtime.client())
            .producer_group(settings.producer_group.as_str())
            .name_server_addr(settings.name_server.as_str())
            .topics(vec![settings.topic.as_str()])
            .send_msg_timeout(settings.send_timeout_ms_u32())
            .transaction_listener(ListenerAdapter { local })
            .check_thread_pool_min_size(1)
            .check_thread_pool_max_size(CHECK_WORKERS);
        if let Some(hook) = settings.acl_hook() {
            builder = builder.rpc_hook(hook);
        }
        let mut producer = builder.build();
        producer
            .start()
            .await
            .map_err(MqError::client("transactional producer start"))?;
        info!(
            producer_group = %settings.producer_group,
            elapsed_ms = started.elapsed().as_millis(),
            "Transactional producer started."
        );
        Ok(Self {
            producers: Arc::new(Inner {
                topic: settings.topic.clone(),
                tag: settings.tag.clone(),
                settings: settings.clone(),
                plain_group: plain_group_of(&settings.producer_group),
                client: runtime.client(),
                transactional: RwLock::new(Some(producer)),
                plain: RwLock::new(PlainProducer::NotStarted),
            }),
        })
    }

    /// Sends `orders` (one, or several of one product) as one transactional message and
    /// returns the local transaction's outcome as the client reported it once the half message
    /// was stored (`Rollback` without calling the local transaction when the broker stored it
    /// but reported a flush/replica timeout). The message's `traceparent` property is the
    /// first order's; each order keeps its own in the body. The local transaction gets
    /// `orders` themselves and runs under `sent_under` ([`LocalTransaction::execute`]).
    ///
    /// `Err` means the half message is **not known to be stored** (timeout, broker down, no
    /// route): the local transaction did not run, and the caller releases the units. Should
    /// the broker have stored it after all, its check-back finds them released and rolls
    /// it back.
    pub async fn send_in_transaction(
        &self,
        orders: Vec<OrderPlaced>,
        sent_under: tracing::Span,
    ) -> Result<TxDecision> {
        self.producers.send_in_transaction(orders, sent_under).await
    }

    /// Sends `order` as a plain, immediately visible message (reconcile's re-publish of a
    /// confirmed order whose message never arrived; the consumer is idempotent, so a duplicate
    /// is harmless). The plain producer starts on first use, in group
    /// `<producer_group>-plain`.
    pub async fn publish(&self, order: &OrderPlaced, traceparent: Option<&str>) -> Result<()> {
        self.producers
            .publish(std::slice::from_ref(order), traceparent)
            .await
    }

    /// Sends `orders` (one product's, as a transactional message carries them) together as
    /// one plain message: what the broker does for a committed message of that size without
    /// the half message and the END_TRANSACTION, the floor `make bench` holds the
    /// transactional sends to.
    pub async fn publish_together(
        &self,
        orders: &[OrderPlaced],
        traceparent: Option<&str>,
    ) -> Result<()> {
        self.producers.publish(orders, traceparent).await
    }

    /// Waits for sends in flight, then stops both producers; later sends fail with
    /// [`MqError::ShutDown`]. Stopping the transactional producer also stops answering
    /// check-backs from this process — other replicas of the group (or this one, restarted)
    /// answer them. Idempotent.
    pub async fn shutdown(&self) {
        self.producers.shutdown().await;
    }
}

impl Producers for Inner {
    fn topic(&self) -> &str {
        &self.topic
    }

    fn send_in_transaction(
        &self,
        orders: Vec<OrderPlaced>,
        sent_under: tracing::Span,
    ) -> BoxFuture<'_, Result<TxDecision>> {
        Box::pin(self.send_transactional(orders, sent_under))
    }

    fn publish<'a>(
        &'a self,
        orders: &'a [OrderPlaced],
        traceparent: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.publish_plain(orders, traceparent))
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.stop())
    }
}

impl Inner {
    async fn send_transactional(
        &self,
        orders: Vec<OrderPlaced>,
        sent_under: tracing::Span,
    ) -> Result<TxDecision> {
        let traceparent = orders.first().and_then(|o| o.traceparent.as_deref());
        let message = orders_message(&self.topic, &self.tag, &orders, traceparent)?;
        let (first, count) = (orders[0].order_token.clone(), orders.len());
        let guard = self.transactional.read().await;
        let producer = guard.as_ref().ok_or(MqError::ShutDown)?;
        let result = producer
            .send_message_in_transaction(message, Some(SentAlong { orders, sent_under }))
            .await
            .map_err(MqError::Send)?;
        let decision = result
            .local_transaction_state
            .map_or(TxDecision::Unknown, TxDecision::from);
        debug!(
            order_token = %first,
            orders = count,
            ?decision,
            msg_id = ?result.send_result.as_ref().and_then(|r| r.msg_id.as_ref()),
            "Transactional message sent."
        );
        Ok(decision)
    }

    async fn publish_plain(&self, orders: &[OrderPlaced], traceparent: Option<&str>) -> Result<()> {
        let message = orders_message(&self.topic, &self.tag, orders, traceparent)?;
        self.ensure_plain_started().await?;
        let guard = self.plain.read().await;
        let PlainProducer::Running(producer) = &*guard else {
            return Err(MqError::ShutDown);
        };
        let result = send_plain(producer, message).await?;
        debug!(orders = orders.len(), first_order_token = %orders[0].order_token, msg_id = ?result.msg_id, "Orders published.");
        Ok(())
    }

    async fn ensure_plain_started(&self) -> Result<()> {
        if !matches!(*self.plain.read().await, PlainProducer::NotStarted) {
            return Ok(());
        }
        let mut guard = self.plain.write().await;
        if !matches!(*guard, PlainProducer::NotStarted) {
            return Ok(());
        }
        let producer = start_plain_producer(
            Arc::clone(&self.client),
            &self.plain_group,
            &self.settings,
            &self.topic,
        )
        .await?;
        *guard = PlainProducer::Running(producer);
        Ok(())
    }

    async fn stop(&self) {
        if let Some(mut producer) = self.transactional.write().await.take() {
            producer.shutdown().await;
            info!("Transactional producer shut down.");
        }
        let mut plain = self.plain.write().await;
        if let PlainProducer::Running(mut producer) =
            std::mem::replace(&mut *plain, PlainProducer::ShutDown)
        {
            producer.shutdown().await;
            info!("Plain producer shut down.");
        }
    }
}

/// Starts a plain (non-transactional) producer in `group` for `topic`. A producer group is
/// registered once per client instance, so each kind of plain producer has a group of its own.
pub(crate) async fn start_plain_producer(
    client: Arc<ClientRuntime>,
    group: &str,
    settings: &MqSettings,
    topic: &str,
) -> Result<DefaultMQProducer> {
    let started = Instant::now();
    let mut builder = DefaultMQProducer::builder(client)
        .producer_group(group)
        .name_server_addr(settings.name_server.as_str())
        .topics(vec![topic.into()])
        .send_msg_timeout(settings.send_timeout_ms_u32());
    if let Some(hook) = settings.acl_hook() {
        builder = builder.rpc_hook(hook);
    }
    let mut producer = builder.build();
    producer
        .start()
        .await
        .map_err(MqError::client("plain producer start"))?;
    info!(
        producer_group = group,
        elapsed_ms = started.elapsed().as_millis(),
        "Plain producer started."
    );
    Ok(producer)
}

/// Sends `message` plainly; only a `SEND_OK` counts as stored.
pub(crate) async fn send_plain(
    producer: &DefaultMQProducer,
    message: Message,
) -> Result<SendResult> {
    match producer.send(message).await.map_err(MqError::Send)? {
        Some(result) if result.send_status == SendStatus::SendOk => Ok(result),
        Some(result) => Err(MqError::NotStored(format!("{:?}", result.send_status))),
        None => Err(MqError::NotStored("no send result".into())),
    }
}

/// Whether every token names the same product.
fn one_product<'a>(mut tokens: impl Iterator<Item = &'a OrderToken>) -> bool {
    let Some(first) = tokens.next().map(OrderToken::product_id) else {
        return true;
    };
    tokens.all(|token| token.product_id() == first)
}

fn plain_group_of(producer_group: &str) -> String {
    format!("{producer_group}-plain")
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use domain::{ProductId, UserId};

    use super::*;
    use crate::message::order_message;

    /// Answers `Commit` and records what it was asked.
    #[derive(Default)]
    struct Recording {
        executed: Mutex<Vec<OrderPlaced>>,
        checked: Mutex<Vec<OrderToken>>,
    }

    impl LocalTransaction for Recording {
        fn execute(&self, orders: &[OrderPlaced], _: &tracing::Span) -> TxDecision {
            self.executed.lock().unwrap().extend_from_slice(orders);
            TxDecision::Commit
        }
        fn check(&self, order_tokens: &[OrderToken]) -> TxDecision {
            self.checked.lock().unwrap().extend_from_slice(order_tokens);
            TxDecision::Commit
        }
    }

    fn adapter() -> (Arc<Recording>, ListenerAdapter) {
        let recording = Arc::new(Recording::default());
        let local: Arc<dyn LocalTransaction> = recording.clone();
        (recording, ListenerAdapter { local })
    }

    fn order() -> OrderPlaced {
        OrderPlaced::new(OrderToken::new(ProductId(4), 0xabc), UserId(1), 1, 1)
    }

    #[test]
    fn decisions_map_both_ways_onto_the_client_states() {
        for decision in [
            TxDecision::Commit,
            TxDecision::Rollback,
            TxDecision::Unknown,
        ] {
            assert_eq!(
                TxDecision::from(LocalTransactionState::from(decision)),
                decision
            );
        }
    }

    #[test]
    fn execute_gets_the_decoded_order() {
        let (recording, adapter) = adapter();
        let message = order_message("t", "order", &order(), None).unwrap();
        let state = adapter.execute_local_transaction(&message, None);
        assert_eq!(state, LocalTransactionState::CommitMessage);
        assert_eq!(*recording.executed.lock().unwrap(), vec![order()]);
    }

    #[test]
    fn execute_gets_the_orders_handed_over_beside_the_message_without_decoding_it() {
        let (recording, adapter) = adapter();
        let message = Message::builder()
            .topic("t")
            .key(order().order_token.to_string())
            .body(b"a body nobody reads".to_vec())
            .build()
            .unwrap();
        let along = SentAlong {
            orders: vec![order()],
            sent_under: tracing::Span::none(),
        };
        let state = adapter.execute_local_transaction(&message, Some(&along));
        assert_eq!(state, LocalTransactionState::CommitMessage);
        assert_eq!(*recording.executed.lock().unwrap(), vec![order()]);
    }

    #[test]
    fn an_undecodable_half_message_is_rolled_back_without_asking() {
        let (recording, adapter) = adapter();
        let message = Message::builder()
            .topic("t")
            .key(order().order_token.to_string())
            .body(b"not json".to_vec())
            .build()
            .unwrap();
        let state = adapter.execute_local_transaction(&message, None);
        assert_eq!(state, LocalTransactionState::RollbackMessage);
        assert!(recording.executed.lock().unwrap().is_empty());
    }

    #[test]
    fn check_gets_the_order_token_from_the_key() {
        let (recording, adapter) = adapter();
        let received = MessageExt {
            message: order_message("t", "order", &order(), None).unwrap(),
            ..MessageExt::default()
        };
        let state = adapter.check_local_transaction(&received);
        assert_eq!(state, LocalTransactionState::CommitMessage);
        assert_eq!(
            *recording.checked.lock().unwrap(),
            vec![order().order_token]
        );
    }

    #[test]
    fn execute_and_check_get_every_order_of_a_message_of_several() {
        let (recording, adapter) = adapter();
        let orders: Vec<OrderPlaced> = (1..=3)
            .map(|n| OrderPlaced::new(OrderToken::new(ProductId(4), n), UserId(n as u64), 1, 1))
            .collect();
        let message = orders_message("t", "order", &orders, None).unwrap();
        assert_eq!(
            adapter.execute_local_transaction(&message, None),
            LocalTransactionState::CommitMessage
        );
        let received = MessageExt {
            message,
            ..MessageExt::default()
        };
        assert_eq!(
            adapter.check_local_transaction(&received),
            LocalTransactionState::CommitMessage
        );
        let tokens: Vec<OrderToken> = orders.iter().map(|o| o.order_token.clone()).collect();
        assert_eq!(*recording.executed.lock().unwrap(), orders);
        assert_eq!(*recording.checked.lock().unwrap(), tokens);
    }

    #[test]
    fn a_check_back_naming_orders_of_two_products_is_rolled_back_without_asking() {
        let (recording, adapter) = adapter();
        let mut received = MessageExt::default();
        received.set_keys(
            format!(
                "{} {}",
                OrderToken::new(ProductId(4), 1),
                OrderToken::new(ProductId(5), 1)
            )
            .into(),
        );
        let state = adapter.check_local_transaction(&received);
        assert_eq!(state, LocalTransactionState::RollbackMessage);
        assert!(recording.checked.lock().unwrap().is_empty());
    }

    #[test]
    fn a_check_back_with_an_unparseable_key_is_rolled_back_without_asking() {
        let (recording, adapter) = adapter();
        let mut received = MessageExt::default();
        received.set_keys("garbage".into());
        let state = adapter.check_local_transaction(&received);
        assert_eq!(state, LocalTransactionState::RollbackMessage);
        assert!(recording.checked.lock().unwrap().is_empty());
    }
}
