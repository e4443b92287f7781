use std::future::Future;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_redis::redis::AsyncCommands;
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl, SimpleAsyncConnection};
use domain::{Closing, OrderPlaced, OrderToken, PreDeductOutcome, ProductId, UserId};
use order_lifecycle::Ending;
use order_store::{Payment, PaymentOutcome};
use reconcile_svc::Settings;
use reconcile_svc::report::{Finding, Outcome, Report};
use reconcile_svc::{Application, ManualAction, Policy};
use test_support::service::InProcessService;
use test_support::stack::TestStack;

pub const PRODUCT: ProductId = ProductId(1);
pub const STOCK: i64 = 10;

pub struct Sale {
    pub stack: TestStack,
    grace_secs: &'static str,
}

impl Sale {
    /// A product with `STOCK` units loaded on both sides; flows older than `grace_secs`
    /// count as missing their order.
    pub async fn open(grace_secs: &'static str) -> Self {
        let stack = TestStack::new().await;
        stack.open_sale(PRODUCT, STOCK, 5).await;
        Self { stack, grace_secs }
    }

    pub fn settings(&self) -> Settings {
        self.settings_with(&[])
    }

    pub fn settings_with(&self, extra: &[(&str, &str)]) -> Settings {
        let mut all = vec![("SECKILL_RECONCILE__GRACE_SECS", self.grace_secs)];
        all.extend_from_slice(extra);
        self.stack.settings(&all)
    }

    /// A unit reserved in Redis (a flow), as the gateway's pre-deduct leaves it.
    pub async fn reserve(&self, user: u64) -> OrderToken {
        let token = OrderToken::random(PRODUCT);
        let outcome = self
            .stack
            .redis
            .cache()
            .pre_deduct(&token, UserId(user), 1)
            .await
            .unwrap();
        assert!(matches!(outcome, PreDeductOutcome::Reserved { .. }));
        token
    }

    /// The whole happy path without the broker: reserved, committed, ordered.
    pub async fn sell(&self, user: u64) -> OrderToken {
        let token = self.reserve(user).await;
        assert!(self.stack.redis.cache().confirm(&token).await.unwrap());
        self.write_order(&token, user).await;
        token
    }

    pub async fn write_order(&self, token: &OrderToken, user: u64) {
        let order = OrderPlaced::new(token.clone(), UserId(user), 1, 0);
        self.stack.db.db().write_orders(&[order]).await.unwrap();
    }

    /// [`Sale::sell`], with the order to be paid by `pay_by`.
    pub async fn sell_due(&self, user: u64, pay_by: DateTime<Utc>) -> OrderToken {
        let token = self.reserve(user).await;
        assert!(self.stack.redis.cache().confirm(&token).await.unwrap());
        let order = OrderPlaced::new(token.clone(), UserId(user), 1, 0);
        self.stack
            .db
            .db()
            .write_orders_due(&[order], pay_by)
            .await
            .unwrap();
        token
    }

    /// The provider's callback for one unit of `token`, through the live path.
    pub async fn pay(&self, token: &OrderToken, payment_id: &str) -> PaymentOutcome {
        let db = self.stack.db.db();
        let price = db.product(PRODUCT).await.unwrap().unwrap().price_cents;
        let payment = Payment {
            payment_id: payment_id.to_owned(),
            order_token: token.clone(),
            amount_cents: price,
            paid_at: Utc::now(),
        };
        order_lifecycle::pay(db, self.stack.redis.cache(), &payment)
            .await
            .unwrap()
    }

    /// The buyer's cancel, through the live path: MySQL, then Redis.
    pub async fn cancel(&self, token: &OrderToken) {
        let ending = order_lifecycle::close(
            self.stack.db.db(),
            self.stack.redis.cache(),
            token,
            Closing::Cancelled,
        )
        .await
        .unwrap();
        assert!(matches!(ending, Ending::Now(_)), "{ending:?}");
    }

    pub async fn sql(&self, statement: &str) {
        let mut conn = AsyncMysqlConnection::establish(self.stack.db.url())
            .await
            .unwrap();
        diesel::sql_query(statement)
            .execute(&mut conn)
            .await
            .unwrap();
    }

    /// `statements` over the text protocol, for what cannot be prepared (a trigger).
    pub async fn batch_sql(&self, statements: &str) {
        let mut conn = AsyncMysqlConnection::establish(self.stack.db.url())
            .await
            .unwrap();
        conn.batch_execute(statements).await.unwrap();
    }

    pub async fn set_redis_stock(&self, stock: i64) {
        let key = self.stack.redis.cache().keys(PRODUCT).stock;
        let mut conn = self.stack.redis.connection().await;
        let () = conn.set(key, stock).await.unwrap();
    }

    pub async fn redis_stock(&self) -> i64 {
        self.stack
            .redis
            .cache()
            .stock(PRODUCT)
            .await
            .unwrap()
            .unwrap()
    }

    pub async fn mysql_stock(&self) -> i64 {
        self.stack.db.db().stock(PRODUCT).await.unwrap().unwrap()
    }

    /// Runs the consumer until `token`'s order is in MySQL (or panics after 60 s).
    pub async fn consume_until_ordered(&self, token: &OrderToken) {
        let _consumer = self.start_consumer(&[]).await;
        self.wait_ordered(token, Duration::from_secs(60)).await;
    }

    pub async fn start_consumer(&self, extra: &[(&str, &str)]) -> InProcessService {
        let settings = self.stack.settings(extra);
        InProcessService::start("consumer", move |shutdown, port| async move {
            let app = order_consumer_svc::Application::build(settings).await?;
            let _ = port.send(app.port());
            app.run_until_stopped(shutdown).await
        })
        .await
    }

    pub async fn wait_ordered(&self, token: &OrderToken, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.stack.db.db().order(token).await.unwrap().is_none() {
            assert!(Instant::now() < deadline, "the order never arrived");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// One reconcile run, on a thread and runtime of its own, as `reconcile-svc --once`
/// would run it (the RocketMQ client's runtime must not be dropped inside the test's).
pub async fn reconcile(settings: Settings, policy: Policy) -> anyhow::Result<Report> {
    with_app(settings, Some(policy), false, move |app| {
        Box::pin(async move { app.auditor.run(policy, Some(PRODUCT)).await })
    })
    .await
}

/// `reconcile-svc --once --dry-run`.
pub async fn dry_run(settings: Settings, policy: Policy) -> anyhow::Result<Report> {
    with_app(settings, Some(policy), true, move |app| {
        Box::pin(async move { app.auditor.run(policy, Some(PRODUCT)).await })
    })
    .await
}

/// `reconcile-svc repair --token T --action A`.
pub async fn repair(
    settings: Settings,
    token: OrderToken,
    action: ManualAction,
) -> anyhow::Result<Finding> {
    with_app(settings, None, false, move |app| {
        Box::pin(async move { app.auditor.repair_token(&token, action).await })
    })
    .await
}

type Job<T> = Box<
    dyn for<'a> FnOnce(
            &'a Application,
        ) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<T>> + 'a>>
        + Send,
>;

async fn with_app<T, F>(
    settings: Settings,
    policy: Option<Policy>,
    dry_run: bool,
    job: F,
) -> anyhow::Result<T>
where
    T: Send + 'static,
    F: for<'a> FnOnce(
            &'a Application,
        ) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<T>> + 'a>>
        + Send
        + 'static,
{
    let job: Job<T> = Box::new(job);
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Runtime::new()?.block_on(async {
            let app = Application::build(settings, policy, dry_run).await?;
            let result = job(&app).await;
            app.close().await;
            result
        })
    })
    .await?
}

/// The findings of a report, as (kind, outcome) pairs.
pub fn findings(report: &Report) -> Vec<(&'static str, Outcome)> {
    report
        .discrepancies
        .iter()
        .map(|f| (f.kind.as_str(), f.outcome))
        .collect()
}
