//! The private Redis topologies do what the tests built on them take for granted.

use redis::aio::MultiplexedConnection;
use test_support::redis_topology::{RedisCluster, SentinelGroup};

async fn connect(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

async fn role_of(url: &str) -> String {
    let reply: Vec<redis::Value> = redis::cmd("ROLE")
        .query_async(&mut connect(url).await)
        .await
        .unwrap();
    redis::from_redis_value_ref(&reply[0]).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sentinel_failover_promotes_the_replica_and_demotes_the_primary() {
    let group = SentinelGroup::start().await;
    let old = group.primary_url().await;
    assert_eq!(
        old,
        group.node_urls()[0],
        "the sentinels name the started primary"
    );
    assert_eq!(group.sentinel_urls().len(), 3);
    let _: () = redis::cmd("SET")
        .arg("sale")
        .arg("open")
        .query_async(&mut connect(&old).await)
        .await
        .unwrap();
    let _: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(&mut connect(&old).await)
        .await
        .unwrap();

    let new = group.failover().await;

    assert_ne!(new, old);
    assert_eq!(group.primary_url().await, new);
    let sale: String = redis::cmd("GET")
        .arg("sale")
        .query_async(&mut connect(&new).await)
        .await
        .unwrap();
    assert_eq!(sale, "open");
    assert_eq!(role_of(&new).await, "master");
    assert_eq!(role_of(&old).await, "slave");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_serves_every_slot_and_moves_one_with_its_keys() {
    let cluster = RedisCluster::start(3).await;
    let nodes = cluster.node_urls();
    assert_eq!(nodes.len(), 3);
    for slot in [0, 5461, 10923, 16383] {
        assert!(nodes.contains(&cluster.node_of_slot(slot).await));
    }
    for key in ["sale", "{sale}:stock", "{}x", "a{b}c{d}", "123456789"] {
        let server: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut connect(&nodes[0]).await)
            .await
            .unwrap();
        assert_eq!(RedisCluster::key_slot(key), server, "the slot of {key:?}");
    }

    let keys: Vec<String> = (0..250).map(|i| format!("{{sale}}:{i}")).collect();
    let slot = RedisCluster::key_slot(&keys[0]);
    let from = cluster.node_of_slot(slot).await;
    let mut source = connect(&from).await;
    for key in &keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(key)
            .query_async(&mut source)
            .await
            .unwrap();
    }
    let to = nodes.iter().find(|url| **url != from).unwrap().clone();

    cluster.move_slot(slot, &to).await;

    assert_eq!(cluster.node_of_slot(slot).await, to);
    let mut target = connect(&to).await;
    for key in &keys {
        let value: String = redis::cmd("GET")
            .arg(key)
            .query_async(&mut target)
            .await
            .unwrap();
        assert_eq!(&value, key);
    }
    let moved = redis::cmd("GET")
        .arg(&keys[0])
        .query_async::<String>(&mut source)
        .await
        .unwrap_err();
    assert_eq!(
        moved.code(),
        Some("MOVED"),
        "the old owner redirects: {moved}"
    );
}
