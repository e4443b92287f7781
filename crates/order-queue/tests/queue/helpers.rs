use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use domain::{OrderPlaced, OrderToken, ProductId, UserId};
use order_queue::{
    BatchHandler, BatchVerdict, ConsumerTuning, Delivery, LocalTransaction, MqRuntime, MqSettings,
    OrderPublisher, OrderSubscriber, TxDecision, ensure_topic,
};

/// The longest any test waits for something the broker should do.
pub const WAIT: Duration = Duration::from_secs(60);

pub const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

pub fn name_server() -> String {
    std::env::var("SECKILL_TEST_NAMESRV").unwrap_or_else(|_| "127.0.0.1:19876".into())
}

/// Settings with a topic and groups no other test uses.
pub fn settings(test: &str) -> MqSettings {
    let suffix = format!("{test}-{:08x}", rand::random::<u32>());
    MqSettings {
        name_server: name_server(),
        topic: format!("oq-test-{suffix}"),
        tag: "order".into(),
        producer_group: format!("oq-p-{suffix}"),
        consumer_group: format!("oq-c-{suffix}"),
        send_timeout_ms: 5_000,
        queue_count: 4,
        deadline_topic: format!("oq-deadline-{suffix}"),
        deadline_consumer_group: format!("oq-e-{suffix}"),
        access_key: String::new(),
        secret_key: String::new().into(),
    }
}

pub fn order() -> OrderPlaced {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    OrderPlaced::new(OrderToken::random(ProductId(42)), UserId(7), 1, now_ms)
}

pub fn tuning() -> ConsumerTuning {
    ConsumerTuning {
        batch_size: 16,
        pull_batch_size: 32,
        consume_threads: 4,
        max_reconsume_times: 3,
        linger: Duration::ZERO,
    }
}

/// A local transaction whose answers are scripted per order token; it records when it was
/// asked. Unscripted tokens are rolled back.
#[derive(Default)]
pub struct Scripted {
    execute: Mutex<HashMap<OrderToken, TxDecision>>,
    check: Mutex<HashMap<OrderToken, TxDecision>>,
    pub checked_at: Mutex<Vec<(OrderToken, Instant)>>,
    /// How many orders each executed message carried, in the order execution began.
    pub executed: Mutex<Vec<usize>>,
    /// A message with this order is held in its local transaction until `release`.
    held: Mutex<Option<OrderToken>>,
    released: Condvar,
}

impl Scripted {
    pub fn script(&self, token: &OrderToken, execute: TxDecision, check: TxDecision) {
        self.execute.lock().unwrap().insert(token.clone(), execute);
        self.check.lock().unwrap().insert(token.clone(), check);
    }

    /// Holds the local transaction of the message carrying `token` (its send stays under
    /// way) until [`Scripted::release`].
    pub fn hold(&self, token: &OrderToken) {
        *self.held.lock().unwrap() = Some(token.clone());
    }

    pub fn release(&self) {
        *self.held.lock().unwrap() = None;
        self.released.notify_all();
    }

    pub fn first_check_of(&self, token: &OrderToken) -> Option<Instant> {
        self.checked_at
            .lock()
            .unwrap()
            .iter()
            .find(|(t, _)| t == token)
            .map(|(_, at)| *at)
    }
}

impl LocalTransaction for Scripted {
    /// The decision scripted for the message's first order (the tests script one per
    /// message).
    fn execute(&self, orders: &[OrderPlaced], _: &tracing::Span) -> TxDecision {
        self.executed.lock().unwrap().push(orders.len());
        let held = self.held.lock().unwrap();
        let is_held = |held: &mut Option<OrderToken>| {
            held.as_ref()
                .is_some_and(|token| orders.iter().any(|o| &o.order_token == token))
        };
        let (_held, timeout) = self
            .released
            .wait_timeout_while(held, WAIT, is_held)
            .unwrap();
        assert!(!timeout.timed_out(), "a held send was never released");
        let decisions = self.execute.lock().unwrap();
        decisions
            .get(&orders[0].order_token)
            .copied()
            .unwrap_or(TxDecision::Rollback)
    }

    fn check(&self, order_tokens: &[OrderToken]) -> TxDecision {
        let order_token = &order_tokens[0];
        self.checked_at
            .lock()
            .unwrap()
            .push((order_token.clone(), Instant::now()));
        let decisions = self.check.lock().unwrap();
        decisions
            .get(order_token)
            .copied()
            .unwrap_or(TxDecision::Rollback)
    }
}

/// Records every delivery; answers `RetryLater` the first time it sees a token listed in
/// `retry_once`, `Done` otherwise.
#[derive(Default)]
pub struct Recorder {
    deliveries: Mutex<Vec<(Delivery, Instant)>>,
    retry_once: Mutex<Vec<String>>,
}

impl Recorder {
    pub fn retry_once(&self, token: &OrderToken) {
        self.retry_once.lock().unwrap().push(token.to_string());
    }

    /// Deliveries of `token`, in arrival order.
    pub fn of(&self, token: &OrderToken) -> Vec<(Delivery, Instant)> {
        let key = token.to_string();
        self.deliveries
            .lock()
            .unwrap()
            .iter()
            .filter(|(d, _)| d.key.as_deref() == Some(key.as_str()))
            .cloned()
            .collect()
    }

    /// How many batches the handler was given, and how many messages in all.
    pub fn batches_and_messages(&self) -> (usize, usize) {
        let deliveries = self.deliveries.lock().unwrap();
        // A batch's deliveries share the instant it was handed over.
        let batches: std::collections::BTreeSet<Instant> =
            deliveries.iter().map(|(_, at)| *at).collect();
        (batches.len(), deliveries.len())
    }

    /// Every order delivered so far, from every message (one order or several).
    pub fn delivered_orders(&self) -> Vec<OrderPlaced> {
        self.deliveries
            .lock()
            .unwrap()
            .iter()
            .flat_map(|(d, _)| OrderPlaced::decode_all(&d.body).expect("our messages decode"))
            .collect()
    }

    /// Waits until `token` has been delivered at least `count` times; panics after [`WAIT`].
    pub async fn wait_for(
        &self,
        token: &OrderToken,
        count: usize,
        what: &str,
    ) -> Vec<(Delivery, Instant)> {
        let started = Instant::now();
        loop {
            let seen = self.of(token);
            if seen.len() >= count {
                return seen;
            }
            assert!(
                started.elapsed() < WAIT,
                "{what}: {token} delivered {} time(s) in {WAIT:?}, expected {count}",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl BatchHandler for Recorder {
    fn handle(&self, batch: &[Delivery]) -> BatchVerdict {
        let now = Instant::now();
        let mut verdict = BatchVerdict::Done;
        {
            let mut retry = self.retry_once.lock().unwrap();
            for delivery in batch {
                if let Some(key) = &delivery.key
                    && let Some(i) = retry.iter().position(|k| k == key)
                {
                    retry.remove(i);
                    verdict = BatchVerdict::RetryLater;
                }
            }
        }
        let mut deliveries = self.deliveries.lock().unwrap();
        deliveries.extend(batch.iter().cloned().map(|d| (d, now)));
        verdict
    }
}

/// One test's runtime, topic, publisher and subscriber.
pub struct Stack {
    pub settings: MqSettings,
    pub local: Arc<Scripted>,
    pub recorder: Arc<Recorder>,
    pub publisher: OrderPublisher,
    subscriber: OrderSubscriber,
    runtime: MqRuntime,
}

impl Stack {
    pub async fn start(test: &str) -> Self {
        Self::start_with(test, tuning()).await
    }

    pub async fn start_with(test: &str, tuning: ConsumerTuning) -> Self {
        let settings = settings(test);
        let runtime = MqRuntime::new(&format!("oq-{test}"), 16).expect("runtime builds");

        let started = Instant::now();
        ensure_topic(&runtime, &settings).await.unwrap_or_else(|e| {
            panic!(
                "topic {} could not be created at {}: {e:?}",
                settings.topic, settings.name_server
            )
        });
        eprintln!("[{test}] ensure_topic took {:?}", started.elapsed());

        let local = Arc::new(Scripted::default());
        let started = Instant::now();
        let publisher = OrderPublisher::start(&runtime, &settings, local.clone())
            .await
            .expect("publisher starts");
        eprintln!("[{test}] publisher start took {:?}", started.elapsed());

        let recorder = Arc::new(Recorder::default());
        let started = Instant::now();
        let subscriber = OrderSubscriber::start(&runtime, &settings, tuning, recorder.clone())
            .await
            .expect("subscriber starts");
        eprintln!("[{test}] subscriber start took {:?}", started.elapsed());

        Self {
            settings,
            local,
            recorder,
            publisher,
            subscriber,
            runtime,
        }
    }

    pub async fn shutdown(self) {
        let started = Instant::now();
        self.publisher.shutdown().await;
        self.subscriber.shutdown().await;
        self.runtime.shutdown().await;
        eprintln!(
            "[{}] shutdown took {:?}",
            self.settings.topic,
            started.elapsed()
        );
    }
}
