//! The cache lends one connection to every call at once, in steady use without a round trip
//! to check it, and never lends one again whose call lost it or gave up on its answer. Each
//! test connects as a Redis user of its own, so that `CLIENT LIST` and `CLIENT KILL USER` tell
//! its connections and no other test's.

use std::time::Duration;

use stock_cache::StockCache;
use test_support::redis::{PrivateRedis, TestRedis};

/// Past the idle time after which the pool checks a connection before lending it.
const IDLE: Duration = Duration::from_millis(1200);

/// A Redis user that exists for one test; dropping it deletes the user.
struct OwnUser {
    admin: redis::Connection,
    name: String,
}

impl OwnUser {
    fn new(redis: &TestRedis) -> Self {
        let mut admin = redis::Client::open(redis.url())
            .and_then(|client| client.get_connection())
            .unwrap();
        let name = format!("pool-{}", redis.prefix());
        redis::cmd("ACL")
            .arg(&["SETUSER", &name, "on", ">pw", "~*", "&*", "+@all"])
            .exec(&mut admin)
            .unwrap();
        Self { admin, name }
    }

    /// A cache on `redis`'s server that connects as this user, with at most one connection.
    fn cache(&self, redis: &TestRedis) -> StockCache {
        self.cache_with(redis, 1, Duration::from_secs(5))
    }

    /// The same, with at most `pool_size` connections, giving up on a call after `timeout`.
    fn cache_with(&self, redis: &TestRedis, pool_size: usize, timeout: Duration) -> StockCache {
        let url = redis
            .url()
            .replacen("redis://", &format!("redis://{}:pw@", self.name), 1);
        StockCache::new(&url, pool_size, redis.prefix(), timeout).unwrap()
    }

    /// The ids of this user's open connections, as Redis numbers them.
    fn connection_ids(&mut self) -> Vec<u64> {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut self.admin)
            .unwrap();
        let user = format!("user={}", self.name);
        list.lines()
            .filter(|line| line.split(' ').any(|field| field == user))
            .filter_map(|line| line.strip_prefix("id="))
            .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
            .collect()
    }

    /// Closes every connection of this user, server side; returns how many.
    fn kill_connections(&mut self) -> u64 {
        redis::cmd("CLIENT")
            .arg(&["KILL", "USER", &self.name])
            .query(&mut self.admin)
            .unwrap()
    }
}

impl Drop for OwnUser {
    fn drop(&mut self) {
        let _ = redis::cmd("ACL")
            .arg(&["DELUSER", &self.name])
            .exec(&mut self.admin);
    }
}

#[tokio::test]
async fn calls_made_at_once_share_one_connection() {
    let redis = TestRedis::new();
    let mut user = OwnUser::new(&redis);
    let cache = user.cache_with(&redis, 8, Duration::from_secs(5));

    let calls: Vec<_> = (0..50).map(|_| cache.ping()).collect();
    for answer in futures::future::join_all(calls).await {
        answer.unwrap();
    }

    assert_eq!(user.connection_ids().len(), 1);
}

#[tokio::test]
async fn a_call_that_gave_up_on_its_answer_retires_the_connection() {
    let server = PrivateRedis::start().await;
    let redis = TestRedis::on(&server.url());
    let mut user = OwnUser::new(&redis);
    let cache = user.cache_with(&redis, 8, Duration::from_millis(300));
    cache.ping().await.unwrap();
    let first = user.connection_ids();
    assert_eq!(first.len(), 1);

    server.freeze();
    let unanswered = cache.ping().await;
    server.thaw();
    assert!(unanswered.is_err());

    // Its answer may yet come, but nothing tells a stalled server from a connection left
    // half-open: the next call gets a new one, and the old one is closed.
    cache.ping().await.unwrap();
    let now = user.connection_ids();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now, first);
}

#[tokio::test]
async fn a_connection_lost_in_steady_use_fails_one_call_and_is_never_lent_again() {
    let redis = TestRedis::new();
    let mut user = OwnUser::new(&redis);
    let cache = user.cache(&redis);
    cache.ping().await.unwrap();

    assert_eq!(user.kill_connections(), 1);
    // Lent at once, as it was in use a moment ago: the call finds it gone.
    assert!(cache.ping().await.is_err());
    // Gone from the pool: the next call gets a new connection.
    cache.ping().await.unwrap();
    cache.ping().await.unwrap();
}

#[tokio::test]
async fn a_connection_lost_while_idle_is_replaced_before_it_is_lent() {
    let redis = TestRedis::new();
    let mut user = OwnUser::new(&redis);
    let cache = user.cache(&redis);
    cache.ping().await.unwrap();

    assert_eq!(user.kill_connections(), 1);
    tokio::time::sleep(IDLE).await;
    cache.ping().await.unwrap();
}
