use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Integer, Unsigned, Varchar};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use domain::{OrderPlaced, OrderToken, ProductId, UserId};
use order_consumer_svc::Settings;
use order_consumer_svc::writer::OrderWriter;
use order_queue::{
    BatchHandler, BatchVerdict, Delivery, LocalTransaction, MqRuntime, OrderPublisher, TxDecision,
};
use order_store::{Db, UnwritableOrderRow};
use stock_cache::StockCache;
use test_support::service::InProcessService;
use test_support::stack::TestStack;

/// A stack with an [`OrderWriter`] on its database and Redis prefix: the consumer's write path
/// without the broker.
pub struct TestWriter {
    pub stack: TestStack,
    pub writer: Arc<OrderWriter>,
}

impl TestWriter {
    /// Must run on a multi-thread runtime: the writer blocks on a handle to it from a blocking
    /// thread, so the runtime's workers must keep its connections' I/O going meanwhile.
    pub async fn new() -> Self {
        let stack = TestStack::new().await;
        let writer = writer_on(stack.db.db().clone(), stack.redis.cache().clone());
        Self { stack, writer }
    }

    pub fn db(&self) -> &Db {
        self.stack.db.db()
    }

    pub fn cache(&self) -> &StockCache {
        self.stack.redis.cache()
    }

    /// Hands `batch` to the writer the way the client does: synchronously, on a thread that
    /// is not an async worker.
    pub async fn handle(&self, batch: &[Delivery]) -> BatchVerdict {
        handle(&self.writer, batch).await
    }

    /// Defines `product` with `stock` units in MySQL and loads the same stock into Redis.
    pub async fn put_product(&self, product: u64, stock: i64) {
        put_product(&self.stack, product, stock).await;
    }

    pub async fn mysql_stock(&self, product: u64) -> i64 {
        self.db()
            .stock(ProductId(product))
            .await
            .unwrap()
            .expect("the product is defined")
    }

    pub async fn order_count(&self, product: u64) -> i64 {
        self.db().order_count(ProductId(product)).await.unwrap()
    }

    pub async fn stock_flow_rows(&self, product: u64) -> i64 {
        stock_flow_rows(&self.stack, product).await
    }

    pub async fn confirmed(&self, token: &OrderToken) -> bool {
        self.cache().order_view(token).await.unwrap().confirmed
    }

    /// Every one of `orders` is marked confirmed in Redis.
    pub async fn assert_confirmed<'a>(&self, orders: impl IntoIterator<Item = &'a OrderPlaced>) {
        for order in orders {
            assert!(
                self.confirmed(&order.order_token).await,
                "{} is not marked confirmed",
                order.order_token
            );
        }
    }

    pub async fn rejected(&self) -> Vec<RejectedRow> {
        rejected(&self.stack).await
    }

    /// The record of `order` in `unwritable_order`, if MySQL refused it.
    pub async fn unwritable(&self, order: &OrderPlaced) -> Option<UnwritableOrderRow> {
        self.db()
            .unwritable_order(&order.order_token)
            .await
            .unwrap()
    }
}

/// The writers' transaction size in these tests: small, so that a test can span several.
pub const ORDERS_PER_TRANSACTION: usize = 8;

pub fn writer_on(db: Db, cache: StockCache) -> Arc<OrderWriter> {
    Arc::new(OrderWriter::new(
        db,
        cache,
        ORDERS_PER_TRANSACTION,
        tokio::runtime::Handle::current(),
        16,
    ))
}

pub async fn handle(writer: &Arc<OrderWriter>, batch: &[Delivery]) -> BatchVerdict {
    let writer = Arc::clone(writer);
    let batch = batch.to_vec();
    tokio::task::spawn_blocking(move || writer.handle(&batch))
        .await
        .expect("the handler does not panic")
}

pub async fn put_product(stack: &TestStack, product: u64, stock: i64) {
    stack.open_sale(ProductId(product), stock, 5).await;
}

/// A new order of one unit of `product` by `user`, reserved now.
pub fn order(product: u64, user: u64) -> OrderPlaced {
    OrderPlaced::new(
        OrderToken::random(ProductId(product)),
        UserId(user),
        1,
        now_ms(),
    )
}

pub fn orders(product: u64, n: u64) -> Vec<OrderPlaced> {
    (1..=n).map(|user| order(product, user)).collect()
}

/// The delivery the subscriber would hand over for `order`, sent once.
pub fn delivery(order: &OrderPlaced) -> Delivery {
    Delivery {
        msg_id: format!("msg-{}", order.order_token),
        key: Some(order.order_token.to_string()),
        body: order.encode(),
        reconsume_times: 0,
        traceparent: None,
    }
}

/// One delivery carrying all of `orders`, as the gateway sends winners who share a message.
pub fn message(orders: &[OrderPlaced]) -> Delivery {
    let tokens: Vec<String> = orders.iter().map(|o| o.order_token.to_string()).collect();
    Delivery {
        key: Some(tokens.join(" ")),
        body: OrderPlaced::encode_all(orders),
        ..delivery(&orders[0])
    }
}

pub fn deliveries(orders: &[OrderPlaced]) -> Vec<Delivery> {
    orders.iter().map(delivery).collect()
}

/// A delivery whose body is no order message.
pub fn malformed(msg_id: &str, body: &[u8]) -> Delivery {
    Delivery {
        msg_id: msg_id.to_owned(),
        key: Some("not-an-order-token".into()),
        body: body.to_vec(),
        reconsume_times: 0,
        traceparent: None,
    }
}

fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(since_epoch.as_millis()).expect("a time in range")
}

#[derive(Debug, QueryableByName)]
pub struct RejectedRow {
    #[diesel(sql_type = Varchar)]
    pub msg_id: String,
    #[diesel(sql_type = Varchar)]
    pub reason: String,
    #[diesel(sql_type = diesel::sql_types::Binary)]
    pub body: Vec<u8>,
    #[diesel(sql_type = Unsigned<Integer>)]
    pub body_len: u32,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn connection(stack: &TestStack) -> AsyncMysqlConnection {
    AsyncMysqlConnection::establish(stack.db.url())
        .await
        .expect("a connection to the test database")
}

/// `rejected_message`, oldest first, read behind the store's back.
pub async fn rejected(stack: &TestStack) -> Vec<RejectedRow> {
    diesel::sql_query("SELECT msg_id, reason, body, body_len FROM rejected_message ORDER BY id")
        .load(&mut connection(stack).await)
        .await
        .unwrap()
}

pub async fn stock_flow_rows(stack: &TestStack, product: u64) -> i64 {
    let counted: Count = diesel::sql_query(
        "SELECT COUNT(*) AS n FROM stock_flow WHERE product_id = ? AND op_type = 'SECKILL'",
    )
    .bind::<Unsigned<BigInt>, _>(product)
    .get_result(&mut connection(stack).await)
    .await
    .unwrap();
    counted.n
}

/// Runs `f` until it answers true, or panics with `what` after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if f().await {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The order consumer in this process, on `stack`.
pub async fn spawn_consumer(stack: &TestStack) -> InProcessService {
    spawn_consumer_with(stack, &[]).await
}

/// As [`spawn_consumer`], with further settings (`SECKILL_…` variables and their values).
pub async fn spawn_consumer_with(stack: &TestStack, extra: &[(&str, &str)]) -> InProcessService {
    let settings = stack.settings(extra);
    InProcessService::start("consumer", move |shutdown, port| async move {
        let consumer = order_consumer_svc::Application::build(settings).await?;
        let _ = port.send(consumer.port());
        consumer.run_until_stopped(shutdown).await
    })
    .await
}

/// Stops the service as SIGTERM would, off the test's runtime (stopping joins its thread);
/// returns how it ended and how long that took.
pub async fn stop(service: InProcessService) -> (anyhow::Result<()>, Duration) {
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let result = service.stop();
        (result, started.elapsed())
    })
    .await
    .expect("stopping does not panic")
}

/// Never asked: the tests only publish plain messages. Answers what the gateway would for a
/// reservation it holds.
struct CommitAll;

impl LocalTransaction for CommitAll {
    fn execute(&self, _orders: &[OrderPlaced], _: &tracing::Span) -> TxDecision {
        TxDecision::Commit
    }
    fn check(&self, _order_tokens: &[OrderToken]) -> TxDecision {
        TxDecision::Commit
    }
}

/// Publishes `orders` as plain messages on the stack's topic (creating it first, as a service
/// would), the way reconcile re-publishes. The client gets a thread and a runtime of its own,
/// started and shut down there: its runtime must never be dropped inside the test's.
pub async fn publish(settings: Settings, orders: Vec<OrderPlaced>) {
    publish_packed(settings, orders, 1).await;
}

/// As [`publish`], `per_message` orders (of one product) to a message, as a crowd's
/// winners travel.
pub async fn publish_packed(settings: Settings, orders: Vec<OrderPlaced>, per_message: usize) {
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the publisher");
        runtime.block_on(async move {
            let mq = MqRuntime::new("test-publisher", 4).expect("an MQ client runtime");
            let sent = async {
                order_queue::ensure_topic(&mq, &settings.rocketmq).await?;
                let publisher =
                    OrderPublisher::start(&mq, &settings.rocketmq, Arc::new(CommitAll)).await?;
                let mut result = Ok(());
                for message in orders.chunks(per_message) {
                    result = publisher.publish_together(message, None).await;
                    if result.is_err() {
                        break;
                    }
                }
                publisher.shutdown().await;
                result
            }
            .await;
            mq.shutdown().await;
            sent
        })
    });
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .unwrap()
        .expect("the publisher thread does not panic")
        .unwrap_or_else(|e| panic!("publishing: {e}"));
}
