//! `WAIT` after a winning pre-deduct ([`ReplicaWait`]), against a real replica: a primary
//! and a replica of the test's own, two `redis-server`s on free loopback ports. A replica
//! stopped with SIGSTOP takes in the replication stream but acknowledges nothing, which is
//! what a lagging or unreachable replica looks like to the primary.

use std::time::Duration;

use domain::{FlowState, PreDeductOutcome, UserId};
use redis::aio::MultiplexedConnection;
use stock_cache::{CacheError, ReleaseOutcome, ReplicaWait, StockCache};
use test_support::redis::{PrivateRedis, TestRedis};

use crate::helpers::{PRODUCT, open_sale, token};

/// Generous against a loaded machine, short enough to keep the tests quick.
const WAIT: Duration = Duration::from_millis(500);

async fn connect(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn info_replication(conn: &mut MultiplexedConnection) -> String {
    redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await
        .unwrap()
}

/// A primary and its replica, in sync, with a sale of 10 on the primary under the returned
/// prefix.
async fn sale_on_a_primary_with_a_replica() -> (PrivateRedis, PrivateRedis, TestRedis) {
    let primary = PrivateRedis::start().await;
    let replica = PrivateRedis::start().await;
    let primary_port = primary.url().rsplit(':').next().unwrap().to_owned();
    let mut to_replica = connect(&replica.url()).await;
    let () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(&primary_port)
        .query_async(&mut to_replica)
        .await
        .unwrap();
    let mut to_primary = connect(&primary.url()).await;
    test_support::eventually(Duration::from_secs(20), "the replica in sync", || {
        let (mut to_primary, mut to_replica) = (to_primary.clone(), to_replica.clone());
        async move {
            let primary = info_replication(&mut to_primary).await;
            let replica = info_replication(&mut to_replica).await;
            (primary.contains("connected_slaves:1") && replica.contains("master_link_status:up"))
                .then_some(())
        }
    })
    .await;
    let redis = TestRedis::on(&primary.url());
    redis
        .cache()
        .load_product(PRODUCT, &open_sale(10, 1))
        .await
        .unwrap();
    // The load must have reached the replica before it is frozen in a test.
    let acknowledged: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(&mut to_primary)
        .await
        .unwrap();
    assert_eq!(acknowledged, 1, "the replica never acknowledged the sale");
    (primary, replica, redis)
}

/// A cache on the primary under the test's prefix whose pre-deducts wait for one replica.
fn waiting_cache(primary: &PrivateRedis, redis: &TestRedis) -> StockCache {
    StockCache::new(&primary.url(), 1, redis.prefix(), Duration::from_secs(5))
        .unwrap()
        .waiting_for_replicas(ReplicaWait::new(1, WAIT))
}

#[tokio::test]
async fn a_reservation_is_answered_once_the_replica_holds_its_flow() {
    let (primary, replica, redis) = sale_on_a_primary_with_a_replica().await;
    let cache = waiting_cache(&primary, &redis);
    let token = token();

    let outcome = cache.pre_deduct(&token, UserId(1), 1).await.unwrap();

    assert_eq!(outcome, PreDeductOutcome::Reserved { stock_after: 9 });
    let keys = cache.keys(PRODUCT);
    let on_replica: bool = redis::cmd("HEXISTS")
        .arg(&keys.flow)
        .arg(token.to_string())
        .query_async(&mut connect(&replica.url()).await)
        .await
        .unwrap();
    assert!(on_replica, "WAIT answered before the replica had the flow");
}

#[tokio::test]
async fn a_reservation_no_replica_acknowledged_in_time_is_reported_and_can_be_given_back() {
    let (primary, replica, redis) = sale_on_a_primary_with_a_replica().await;
    let cache = waiting_cache(&primary, &redis);
    let token = token();

    replica.freeze();
    let outcome = cache.pre_deduct(&token, UserId(1), 1).await;
    let released = redis.cache().release(&token, "not_replicated").await;
    replica.thaw();

    let error = outcome.unwrap_err();
    assert!(
        matches!(
            error,
            CacheError::NotReplicated {
                acknowledged: 0,
                wanted: 1
            }
        ),
        "{error:?}"
    );
    assert!(error.reserved_unreplicated());
    assert_eq!(released.unwrap(), ReleaseOutcome::Released);
    assert_eq!(redis.cache().stock(PRODUCT).await.unwrap(), Some(10));
}

#[tokio::test]
async fn without_a_replica_wait_a_reservation_is_answered_while_no_replica_has_it() {
    let (primary, replica, redis) = sale_on_a_primary_with_a_replica().await;
    let plain = StockCache::new(&primary.url(), 1, redis.prefix(), Duration::from_secs(5))
        .unwrap()
        .waiting_for_replicas(ReplicaWait::new(0, WAIT));
    let token = token();

    replica.freeze();
    let outcome = plain.pre_deduct(&token, UserId(1), 1).await;
    replica.thaw();

    assert_eq!(
        outcome.unwrap(),
        PreDeductOutcome::Reserved { stock_after: 9 }
    );
    let flow = redis
        .cache()
        .order_view(&token)
        .await
        .unwrap()
        .flow
        .unwrap();
    assert_eq!(flow.state, FlowState::Reserved);
}

#[tokio::test]
async fn a_refused_purchase_does_not_wait_for_replicas() {
    let (primary, replica, redis) = sale_on_a_primary_with_a_replica().await;
    let cache = waiting_cache(&primary, &redis);

    replica.freeze();
    let started = std::time::Instant::now();
    let outcome = cache.pre_deduct(&token(), UserId(1), 2).await;
    let took = started.elapsed();
    replica.thaw();

    assert_eq!(outcome.unwrap(), PreDeductOutcome::QuantityAboveLimit);
    assert!(took < WAIT, "a refusal waited {took:?} for replicas");
}
