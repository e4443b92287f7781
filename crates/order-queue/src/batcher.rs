//! Winners sent together: several orders of one product under one transactional message.
//!
//! A transactional send costs the broker more than a plain one (half message, then on
//! END_TRANSACTION a read-back, the real message and an op record) and the sender a hop to
//! the client's blocking pool and back, whatever the message holds. So the gateway does not
//! send each winner alone: [`OrderBatcher::send`] queues the order, and a single task sends
//! what is queued — up to `max_orders` of one product per message. A message leaves once it
//! is full or its first order has waited `linger` (Kafka's `linger.ms`): a lone buyer's order
//! waits that long, never for a batch to fill. At a moderate rate a send ends quickly, so
//! without the linger each message would carry only the few winners that came meanwhile;
//! and each message costs the broker and the gateway CPU (thread wake-ups) whatever it
//! carries. A short linger makes messages larger, and that CPU goes back to the purchases
//! (the figures are in docs/bench/experiments.md).
//!
//! While a send is under way, the orders that arrive meanwhile wait for it to end and leave
//! together — unless a quarter of a full message is waiting, which is worth a send of its
//! own (up to `in_flight` at once). On a busy host the work per message is what the broker,
//! the gateway and the consumer spend their CPU on: letting every free send leave at once
//! made many small messages at a moderate rate, and more CPU per winner than under a crowd.
//! The extra sends are still there for a crowd, and for a send that stalls (a broker
//! hiccup): the winners queued behind it soon make a quarter message and leave on their own,
//! and fewer leave on their own once they have waited `patience` — a stalled send would
//! otherwise hold a quiet sale's lone winner until the send timed out.
//!
//! Every order of a message shares its outcome: the local transaction confirms all of its
//! flows or none (`confirm.lua`), a failed send fails them all, and each caller gets that
//! answer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use domain::{MAX_ORDERS_PER_MESSAGE, OrderPlaced, ProductId};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::time::Instant;
use tracing::warn;

use crate::{MqError, OrderPublisher, TxDecision};

/// How orders are grouped into messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchTuning {
    /// Most orders in one message (at most `MAX_ORDERS_PER_MESSAGE`).
    pub max_orders: usize,
    /// Most transactional sends under way at once. A send beside another one starts only for
    /// a quarter of `max_orders` waiting; fewer wait for the send under way to end, or for
    /// `patience`, whichever comes first.
    pub in_flight: usize,
    /// Longest a winner waits behind sends under way before it leaves in a send of its own
    /// (a free one permitting). Well above a healthy send's time, so that it only cuts a
    /// stalled send's hold short and leaves the batching alone.
    pub patience: Duration,
    /// How long a message's first order waits for others to join it, counted from its
    /// arrival (time spent waiting for a free send counts); a full message leaves at once.
    pub linger: Duration,
}

/// What one order's send came to: the message's decision, or why it was not sent (shared by
/// every order of the message).
pub type BatchedSend = Result<TxDecision, SendFailed>;

/// Why a message was not sent: the half message is **not known to be stored** (see
/// [`OrderPublisher::send_in_transaction`]). It holds the error's text with its causes; the
/// batcher logs the error itself once per message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SendFailed(String);

impl From<&MqError> for SendFailed {
    fn from(error: &MqError) -> Self {
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        Self(text)
    }
}

/// Orders waiting to be sent. Bounded, so a stalled broker pushes back on the purchase path
/// instead of queueing without end.
const QUEUE: usize = 4096;

struct Pending {
    order: OrderPlaced,
    /// The span the order was sent under; a message's local transaction is recorded under
    /// its first order's.
    sent_under: tracing::Span,
    answer: oneshot::Sender<BatchedSend>,
    queued_at: Instant,
}

/// Sends orders through an [`OrderPublisher`], several to a message when they queue up.
/// Cheap to clone; the sending task ends once every clone is dropped and the queue is empty.
#[derive(Clone)]
pub struct OrderBatcher {
    queue: mpsc::Sender<Pending>,
    publisher: Arc<OrderPublisher>,
}

impl std::fmt::Debug for OrderBatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderBatcher").finish_non_exhaustive()
    }
}

impl OrderBatcher {
    /// Starts the sending task on the current Tokio runtime.
    pub fn start(publisher: Arc<OrderPublisher>, tuning: BatchTuning) -> Self {
        let (queue, orders) = mpsc::channel(QUEUE);
        let max_orders = tuning.max_orders.clamp(1, MAX_ORDERS_PER_MESSAGE);
        tokio::spawn(send_loop(
            Arc::clone(&publisher),
            orders,
            BatchTuning {
                max_orders,
                ..tuning
            },
            Sends::new(tuning.in_flight.max(1)),
        ));
        Self { queue, publisher }
    }

    /// Sends `order` alone as a plain message, visible to the consumers once stored (see
    /// [`OrderPublisher::publish`]): for an order whose flow is already committed, so that
    /// its delivery no longer waits for the broker's check-back of its transactional
    /// message. The consumer writes an order once, however many messages carry it.
    pub async fn publish(&self, order: &OrderPlaced) -> Result<(), SendFailed> {
        self.publisher
            .publish(order, order.traceparent.as_deref())
            .await
            .map_err(|error| SendFailed::from(&error))
    }

    /// Sends `order` in a transactional message, alone or with others of its product, and
    /// returns that message's outcome (see [`OrderPublisher::send_in_transaction`]). The
    /// message's local transaction runs under `sent_under` if `order` is its first.
    pub async fn send(&self, order: OrderPlaced, sent_under: tracing::Span) -> BatchedSend {
        let (answer, outcome) = oneshot::channel();
        self.queue
            .send(Pending {
                order,
                sent_under,
                answer,
                queued_at: Instant::now(),
            })
            .await
            .map_err(|_| SendFailed::from(&MqError::ShutDown))?;
        // The sending task answers every order it takes; no answer means it is gone.
        outcome
            .await
            .unwrap_or_else(|_| Err(SendFailed::from(&MqError::ShutDown)))
    }
}

/// The transactional sends under way: at most `limit` at once, and a signal each time one
/// ends.
struct Sends {
    permits: Arc<Semaphore>,
    limit: usize,
    ended: Arc<Notify>,
}

impl Sends {
    fn new(limit: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            ended: Arc::new(Notify::new()),
        }
    }

    async fn free(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().acquire_owned().await.ok()
    }

    /// Sends under way, besides the caller's own permit.
    fn others_under_way(&self) -> usize {
        self.limit - self.permits.available_permits() - 1
    }
}

/// A send beside another one needs at least `max_orders / OWN_SEND_FRACTION` orders.
const OWN_SEND_FRACTION: usize = 4;

async fn send_loop(
    publisher: Arc<OrderPublisher>,
    mut orders: mpsc::Receiver<Pending>,
    tuning: BatchTuning,
    sends: Sends,
) {
    let BatchTuning {
        max_orders,
        patience,
        linger,
        ..
    } = tuning;
    let worth_a_send_of_its_own = max_orders.div_ceil(OWN_SEND_FRACTION);
    loop {
        // A free send first, then whatever has queued meanwhile: that is what batches.
        let Some(permit) = sends.free().await else {
            return;
        };
        let Some(first) = orders.recv().await else {
            return;
        };
        let lingered = first.queued_at + linger;
        let mut taken = vec![first];
        take_queued(&mut orders, &mut taken, max_orders);
        gather_until(&mut orders, &mut taken, max_orders, lingered).await;
        // Too few for a send of their own while another is under way: they gather until it
        // ends, enough have come or the first has waited `patience`. (A stale `ended` signal
        // only makes this message smaller.)
        let waited_enough = Instant::now() + patience;
        while taken.len() < worth_a_send_of_its_own && sends.others_under_way() > 0 {
            tokio::select! {
                () = sends.ended.notified() => break,
                () = tokio::time::sleep_until(waited_enough) => break,
                next = orders.recv() => match next {
                    Some(pending) => {
                        taken.push(pending);
                        take_queued(&mut orders, &mut taken, max_orders);
                    }
                    None => break,
                },
            }
        }
        let mut messages = by_product(taken).into_iter();
        let mut permit = Some(permit);
        while let Some(message) = messages.next() {
            let permit = match permit.take() {
                Some(permit) => permit,
                None => match sends.free().await {
                    Some(permit) => permit,
                    None => {
                        fail_all(message.into_iter().chain(messages.flatten()));
                        return;
                    }
                },
            };
            let publisher = Arc::clone(&publisher);
            let ended = Arc::clone(&sends.ended);
            tokio::spawn(async move {
                send_one_message(&publisher, message).await;
                drop(permit);
                ended.notify_one();
            });
        }
    }
}

/// Moves what is queued into `taken`, up to `max_orders` in all, without waiting.
fn take_queued(orders: &mut mpsc::Receiver<Pending>, taken: &mut Vec<Pending>, max_orders: usize) {
    while taken.len() < max_orders {
        match orders.try_recv() {
            Ok(pending) => taken.push(pending),
            Err(_) => break,
        }
    }
}

/// Adds orders to `taken` as they arrive, until it holds `max_orders` or `deadline` passes.
async fn gather_until(
    orders: &mut mpsc::Receiver<Pending>,
    taken: &mut Vec<Pending>,
    max_orders: usize,
    deadline: Instant,
) {
    // One timer for the whole wait, not one per arrival: a crowd's winners arrive by the
    // dozen within a linger.
    // Polled first, so a deadline already past ends the wait at once.
    let mut lingered = std::pin::pin!(tokio::time::sleep_until(deadline));
    while taken.len() < max_orders {
        tokio::select! {
            biased;
            () = &mut lingered => return,
            next = orders.recv() => match next {
                Some(pending) => {
                    taken.push(pending);
                    take_queued(orders, taken, max_orders);
                }
                None => return,
            },
        }
    }
}

/// Groups orders by product (a message's local transaction runs in one product's slot),
/// keeping their order within each product.
fn by_product(taken: Vec<Pending>) -> Vec<Vec<Pending>> {
    let mut groups: Vec<Vec<Pending>> = Vec::new();
    let mut index: HashMap<ProductId, usize> = HashMap::new();
    for pending in taken {
        let slot = *index.entry(pending.order.product_id).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[slot].push(pending);
    }
    groups
}

async fn send_one_message(publisher: &OrderPublisher, message: Vec<Pending>) {
    let sent_under = message
        .first()
        .map_or_else(tracing::Span::none, |first| first.sent_under.clone());
    let (orders, answers): (Vec<OrderPlaced>, Vec<_>) = message
        .into_iter()
        .map(|pending| (pending.order, pending.answer))
        .unzip();
    let count = orders.len();
    // How full the crowd packs the messages: the broker's work is per message, so this is
    // what the broker's cost per order follows.
    metrics::histogram!("seckill_orders_per_message").record(count as f64);
    let outcome = publisher
        .send_in_transaction(orders, sent_under)
        .await
        .map_err(|error| {
            warn!(orders = count, error = ?error, "Transactional send failed.");
            SendFailed::from(&error)
        });
    for answer in answers {
        // A caller that stopped waiting (its request was dropped) leaves its flow to the
        // check-back or reconcile, as a crash at this point would.
        let _ = answer.send(outcome.clone());
    }
}

fn fail_all(pending: impl Iterator<Item = Pending>) {
    for pending in pending {
        let _ = pending
            .answer
            .send(Err(SendFailed::from(&MqError::ShutDown)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::{OrderToken, UserId};

    fn pending(product: u64, n: u128) -> Pending {
        let (answer, _) = oneshot::channel();
        Pending {
            order: OrderPlaced::new(OrderToken::new(ProductId(product), n), UserId(1), 1, 1),
            sent_under: tracing::Span::none(),
            answer,
            queued_at: Instant::now(),
        }
    }

    #[test]
    fn orders_are_grouped_by_product_in_arrival_order() {
        let taken = vec![pending(1, 1), pending(2, 2), pending(1, 3), pending(2, 4)];
        let groups: Vec<Vec<u128>> = by_product(taken)
            .iter()
            .map(|group| group.iter().map(|p| p.order.order_token.nonce()).collect())
            .collect();
        assert_eq!(groups, vec![vec![1, 3], vec![2, 4]]);
    }
}
