//! A key prefix per test: `t<12 random hex>` on the Redis at `SECKILL_TEST_REDIS_URL`
//! (default `redis://127.0.0.1:16379`, the local stack's Redis), with a [`StockCache`] built
//! on it. Every key the cache writes is `{<prefix>:<product>}:…`, so the test's keys are
//! deleted when the [`TestRedis`] is dropped, and tests sharing one server never meet.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use stock_cache::{RedisMode, RedisSettings, StockCache};

const DEFAULT_URL: &str = "redis://127.0.0.1:16379";
/// Enough for a test that fires a few hundred calls at once; the server is shared.
const POOL_SIZE: usize = 16;
/// Generous: a loaded CI machine must not turn a slow answer into a failed test.
const TIMEOUT: Duration = Duration::from_secs(10);

pub struct TestRedis {
    /// A data node, for the helpers that take a connection of their own.
    url: String,
    prefix: String,
    cache: StockCache,
    /// How a service reaches this Redis, as `SECKILL_REDIS__*` variables.
    reach: Vec<(&'static str, String)>,
    /// A Sentinel group or cluster the test started, which goes with it: nothing to clean
    /// up (after a failover the node kept here is a replica, which refuses the deletes).
    topology_of_its_own: bool,
}

impl std::fmt::Debug for TestRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestRedis")
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl TestRedis {
    /// A fresh prefix and a cache on it. Panics when the server cannot be reached: a test
    /// without its Redis cannot say anything useful.
    pub fn new() -> Self {
        Self::on(&url_from_env())
    }

    /// [`TestRedis::new`] on another server than `SECKILL_TEST_REDIS_URL`'s, e.g. the fault
    /// drills' own Redis.
    pub fn on(url: &str) -> Self {
        let url = url.to_owned();
        // 48 random bits: a collision between two live tests is not a practical concern.
        let prefix = format!("t{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
        // The pool connects lazily; ask now so that a missing server fails here, clearly.
        let mut probe = redis::Client::open(url.as_str())
            .and_then(|client| client.get_connection())
            .unwrap_or_else(|e| {
                panic!(
                    "connecting to {url} (is the local Redis up? `bash deploy/local/stack.sh up`): {e}"
                )
            });
        let _: String = redis::cmd("PING")
            .query(&mut probe)
            .unwrap_or_else(|e| panic!("PING {url}: {e}"));
        let cache = StockCache::new(&url, POOL_SIZE, &prefix, TIMEOUT)
            .unwrap_or_else(|e| panic!("a stock cache on {url}: {e}"));
        let reach = vec![("SECKILL_REDIS__URL", url.clone())];
        Self {
            url,
            prefix,
            cache,
            reach,
            topology_of_its_own: false,
        }
    }

    /// A fresh prefix on the primary the `sentinels` name for `master_name`: the cache, and
    /// services given [`TestRedis::service_env`], follow it through a failover. `primary` is
    /// the primary now, which the helpers that connect on their own keep using.
    pub fn on_sentinel(sentinels: &[String], master_name: &str, primary: &str) -> Self {
        Self::on_topology(
            RedisSettings {
                mode: RedisMode::Sentinel,
                nodes: sentinels.to_vec(),
                master_name: Some(master_name.to_owned()),
                ..RedisSettings::standalone(primary, "unused")
            },
            primary,
        )
    }

    /// A fresh prefix on the Redis Cluster found through `seeds`; the helpers that connect on
    /// their own use the first seed node, which holds only the slots it owns.
    pub fn on_cluster(seeds: &[String]) -> Self {
        Self::on_topology(
            RedisSettings {
                mode: RedisMode::Cluster,
                nodes: seeds.to_vec(),
                ..RedisSettings::standalone(&seeds[0], "unused")
            },
            &seeds[0],
        )
    }

    fn on_topology(settings: RedisSettings, data_node: &str) -> Self {
        let prefix = format!("t{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
        let settings = RedisSettings {
            key_prefix: prefix.clone(),
            timeout_ms: TIMEOUT.as_millis() as u64,
            ..settings
        };
        settings.check().expect("test topology settings");
        let cache = settings
            .open(POOL_SIZE)
            .unwrap_or_else(|e| panic!("a stock cache in {:?} mode: {e}", settings.mode));
        let mode = match settings.mode {
            RedisMode::Standalone => "standalone",
            RedisMode::Sentinel => "sentinel",
            RedisMode::Cluster => "cluster",
        };
        let mut reach = vec![
            ("SECKILL_REDIS__MODE", mode.to_owned()),
            ("SECKILL_REDIS__URL", settings.url.clone()),
            ("SECKILL_REDIS__NODES", settings.nodes.join(",")),
        ];
        if let Some(master_name) = settings.master_name {
            reach.push(("SECKILL_REDIS__MASTER_NAME", master_name));
        }
        Self {
            url: data_node.to_owned(),
            prefix,
            cache,
            reach,
            topology_of_its_own: true,
        }
    }

    /// The `SECKILL_REDIS__*` variables that point a service at this Redis and prefix.
    pub fn service_env(&self) -> Vec<(&'static str, String)> {
        let mut env = self.reach.clone();
        env.push(("SECKILL_REDIS__KEY_PREFIX", self.prefix.clone()));
        env
    }

    pub fn cache(&self) -> &StockCache {
        &self.cache
    }

    /// `t<12 hex>`: the first part of every hash tag this test's keys carry.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// A connection of its own, for looking at (or damaging) keys behind the cache's back.
    pub async fn connection(&self) -> MultiplexedConnection {
        redis::Client::open(self.url.as_str())
            .expect("a Redis client")
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.url))
    }

    /// Deletes one field of a hash: a write Redis never got (a call that failed, a failover
    /// to a replica that had not seen it). True when the field was there.
    pub fn delete_field(&self, key: &str, field: &str) -> redis::RedisResult<bool> {
        let mut conn = redis::Client::open(self.url.as_str())?.get_connection()?;
        let deleted: i64 = redis::cmd("HDEL").arg(key).arg(field).query(&mut conn)?;
        Ok(deleted == 1)
    }

    /// One field of a hash, if there.
    pub fn field(&self, key: &str, field: &str) -> redis::RedisResult<Option<String>> {
        let mut conn = redis::Client::open(self.url.as_str())?.get_connection()?;
        redis::cmd("HGET").arg(key).arg(field).query(&mut conn)
    }

    /// Every key under this test's prefix (SCAN, never KEYS: the server is shared).
    pub fn keys(&self) -> redis::RedisResult<Vec<String>> {
        let mut conn = redis::Client::open(self.url.as_str())?.get_connection()?;
        scan_prefix(&mut conn, &self.prefix)
    }
}

impl Default for TestRedis {
    fn default() -> Self {
        Self::new()
    }
}

impl TestRedis {
    /// Deletes every key under this test's prefix: what a Redis restarted without its data
    /// leaves of the test's sale. Returns how many keys there were.
    ///
    /// A blocking connection needs no runtime, so this works from inside a `#[tokio::test]`
    /// as well as after it (in `Drop`); the few round trips block only briefly.
    pub fn delete_all_keys(&self) -> redis::RedisResult<usize> {
        let mut conn = redis::Client::open(self.url.as_str())?.get_connection()?;
        let keys = scan_prefix(&mut conn, &self.prefix)?;
        for chunk in keys.chunks(500) {
            let _: i64 = redis::cmd("DEL").arg(chunk).query(&mut conn)?;
        }
        Ok(keys.len())
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        if self.topology_of_its_own {
            return;
        }
        if let Err(e) = self.delete_all_keys() {
            eprintln!(
                "test-support: could not delete the keys of prefix {}: {e}",
                self.prefix
            );
        }
    }
}

/// `SECKILL_TEST_REDIS_URL`, or the local stack's Redis.
pub fn url_from_env() -> String {
    std::env::var("SECKILL_TEST_REDIS_URL").unwrap_or_else(|_| DEFAULT_URL.into())
}

fn scan_prefix(conn: &mut redis::Connection, prefix: &str) -> redis::RedisResult<Vec<String>> {
    // The prefix is hex, so the pattern holds no glob characters but the final `*`.
    let pattern = format!("{{{prefix}:*");
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, page): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query(conn)?;
        keys.extend(page);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    Ok(keys)
}

/// A `redis-server` of the test's own, on a free loopback port, without persistence: for
/// tests that stall or stop the server, which they must not do to the shared one. Killed
/// when dropped.
pub struct PrivateRedis {
    port: u16,
    child: tokio::process::Child,
}

impl std::fmt::Debug for PrivateRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateRedis")
            .field("port", &self.port)
            .finish()
    }
}

impl PrivateRedis {
    /// Starts `redis-server` (the binary the local stack installs) and waits until it
    /// answers PING.
    pub async fn start() -> Self {
        let port = crate::process::free_port();
        let dir = std::env::temp_dir().join(format!("seckill-test-redis-{port}"));
        std::fs::create_dir_all(&dir).expect("a data folder");
        let child = tokio::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start redis-server (`bash deploy/local/stack.sh up` installs it): {e}"
                )
            });
        let server = Self { port, child };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while server.ping().is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server on port {port} did not answer within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGSTOP: the server keeps its connections and takes in what is sent, but runs and
    /// answers nothing until [`PrivateRedis::thaw`] — a stalled Redis.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// SIGCONT: the server runs what waited in its connections, in its own order.
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("redis-server still runs");
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {pid}: {status}");
    }

    fn ping(&self) -> redis::RedisResult<String> {
        let mut conn = redis::Client::open(self.url())?.get_connection()?;
        redis::cmd("PING").query(&mut conn)
    }
}
