//! The pool lends a connection in steady use without a round trip to check it, and never
//! lends one again whose call lost it. Each test connects as a Redis user of its own, so
//! that `CLIENT KILL USER` cuts its connections and no other test's.

use std::time::Duration;

use stock_cache::StockCache;
use test_support::redis::TestRedis;

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

    /// A cache on `redis`'s server that connects as this user, with one connection.
    fn cache(&self, redis: &TestRedis) -> StockCache {
        let url = redis
            .url()
            .replacen("redis://", &format!("redis://{}:pw@", self.name), 1);
        StockCache::new(&url, 1, redis.prefix(), Duration::from_secs(5)).unwrap()
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
