//! A whole isolated stack for one test: its own database, Redis key prefix, topic and
//! groups on the shared servers, and the settings (or environment) a service needs to
//! run on exactly that.

use std::collections::BTreeMap;

use domain::ProductId;
use order_store::NewProduct;
use platform::ServiceSettings;
use stock_cache::{LoadMode, LoadSpec};

use crate::mysql::TestDb;
use crate::redis::TestRedis;

const DEFAULT_CONFIG: &str = include_str!("../../../config/default.toml");
/// The development secrets: tests run in local mode, as every local run does.
const LOCAL_CONFIG: &str = include_str!("../../../config/local.toml");
const DEFAULT_NAMESRV: &str = "127.0.0.1:19876";

/// Where the shared servers a [`TestStack`] takes its pieces from are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Servers {
    /// `redis://host:port` (no database number needed).
    pub redis_url: String,
    /// `mysql://user:password@host:port`, no database.
    pub mysql_url: String,
    /// The RocketMQ name server, `host:port`.
    pub namesrv: String,
}

impl Servers {
    /// `SECKILL_TEST_REDIS_URL`, `SECKILL_TEST_MYSQL_URL`, `SECKILL_TEST_NAMESRV`, each
    /// defaulting to the local stack's server.
    pub fn from_env() -> Self {
        Self {
            redis_url: crate::redis::url_from_env(),
            mysql_url: crate::mysql::server_url_from_env(),
            namesrv: std::env::var("SECKILL_TEST_NAMESRV")
                .unwrap_or_else(|_| DEFAULT_NAMESRV.to_owned()),
        }
    }
}

pub struct TestStack {
    pub db: TestDb,
    pub redis: TestRedis,
    /// Unique per test: the topic and both groups, so no test sees another's messages.
    pub suffix: String,
    /// The name server the services are pointed at.
    namesrv: String,
}

impl std::fmt::Debug for TestStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestStack")
            .field("suffix", &self.suffix)
            .finish_non_exhaustive()
    }
}

impl TestStack {
    pub async fn new() -> Self {
        Self::on(&Servers::from_env()).await
    }

    /// A stack on the given servers rather than those the environment names: for suites
    /// that run servers of their own (the fault drills kill theirs).
    pub async fn on(servers: &Servers) -> Self {
        Self {
            db: TestDb::create_on(&servers.mysql_url).await,
            redis: TestRedis::on(&servers.redis_url),
            suffix: format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff),
            namesrv: servers.namesrv.clone(),
        }
    }

    /// The name server this stack's topic lives on.
    pub fn namesrv(&self) -> &str {
        &self.namesrv
    }

    pub fn topic(&self) -> String {
        format!("seckill-order-t{}", self.suffix)
    }

    /// `SECKILL_*` variables that point a service at this stack, with every listener on
    /// port 0 (in-process services report the port they got) and quick test timings, in
    /// local mode (`config/local.toml`'s development secrets).
    pub fn env(&self) -> BTreeMap<String, String> {
        let namesrv = self.namesrv.clone();
        let pairs = [
            ("SECKILL_ENV", platform::settings::LOCAL_ENV.to_owned()),
            ("SECKILL_MYSQL__URL", self.db.url().to_owned()),
            ("SECKILL_MYSQL__POOL_SIZE", "4".to_owned()),
            ("SECKILL_REDIS__POOL_SIZE", "16".to_owned()),
            ("SECKILL_ROCKETMQ__NAME_SERVER", namesrv),
            ("SECKILL_ROCKETMQ__TOPIC", self.topic()),
            (
                "SECKILL_ROCKETMQ__PRODUCER_GROUP",
                format!("seckill-gateway-t{}", self.suffix),
            ),
            (
                "SECKILL_ROCKETMQ__CONSUMER_GROUP",
                format!("seckill-consumer-t{}", self.suffix),
            ),
            // Deadlines of one test must reach that test's expirer, with its database.
            (
                "SECKILL_ROCKETMQ__DEADLINE_TOPIC",
                format!("seckill-deadline-t{}", self.suffix),
            ),
            (
                "SECKILL_ROCKETMQ__DEADLINE_CONSUMER_GROUP",
                format!("seckill-expirer-t{}", self.suffix),
            ),
            ("SECKILL_ROCKETMQ__QUEUE_COUNT", "4".to_owned()),
            ("SECKILL_GATEWAY__LISTEN", "127.0.0.1:0".to_owned()),
            ("SECKILL_GATEWAY__SHUTDOWN_GRACE_SECS", "5".to_owned()),
            ("SECKILL_CONSUMER__LISTEN", "127.0.0.1:0".to_owned()),
            ("SECKILL_RECONCILE__LISTEN", "127.0.0.1:0".to_owned()),
            ("SECKILL_RECONCILE__GRACE_SECS", "2".to_owned()),
        ];
        pairs
            .into_iter()
            .chain(self.redis.service_env())
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    }

    /// Settings for an in-process service (its own settings type, `S`): the shipped
    /// defaults and local secrets, this stack, then `extra` (`("SECKILL_SECTION__KEY",
    /// value)` pairs) on top.
    pub fn settings<S: ServiceSettings>(&self, extra: &[(&str, &str)]) -> S {
        let mut env = self.env();
        env.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        platform::settings::from_sources(&[DEFAULT_CONFIG, LOCAL_CONFIG], env)
            .expect("test settings are valid")
    }

    /// A product open for sale now, with the same stock defined in MySQL and loaded in
    /// Redis — the state an admin PUT leaves, without a gateway.
    pub async fn open_sale(&self, product: ProductId, stock: i64, per_user_limit: u32) {
        let definition = NewProduct {
            id: product,
            name: "phone".into(),
            initial_stock: stock,
            per_user_limit,
            starts_at: None,
            ends_at: None,
        };
        self.db
            .db()
            .put_product(&definition, false)
            .await
            .expect("the product is defined in MySQL");
        let spec = LoadSpec {
            initial_stock: stock,
            per_user_limit,
            starts_at_ms: 0,
            ends_at_ms: 0,
            sellable_stock: stock,
            mode: LoadMode::Fresh,
        };
        self.redis
            .cache()
            .load_product(product, &spec)
            .await
            .expect("the product is loaded in Redis");
    }
}
