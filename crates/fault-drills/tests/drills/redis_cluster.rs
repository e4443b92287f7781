//! Drill: the three services on a Redis Cluster of the drill's own (`redis.mode =
//! "cluster"`, three primaries). Products whose slots are spread over all three nodes go on
//! sale at once, each to a crowd of its own, and once the system has settled every promise
//! holds for each of them, in Redis and MySQL alike.

use std::collections::BTreeMap;

use domain::ProductId;
use fault_drills::{CrowdPlan, Drill, Sale, Service, Settle, settle_and_audit};
use test_support::redis::TestRedis;
use test_support::redis_topology::RedisCluster;

use crate::helpers::SETTLE;

const PRIMARIES: usize = 3;
const PRODUCTS_PER_NODE: usize = 2;
const STOCK: i64 = 30;

/// The first product ids that make [`PRODUCTS_PER_NODE`] on each node: the drill's key
/// prefix is random, so which ids those are changes from run to run.
async fn products_on_every_node(cluster: &RedisCluster, redis: &TestRedis) -> Vec<ProductId> {
    let mut per_node: BTreeMap<String, Vec<ProductId>> = BTreeMap::new();
    for product in (1..).map(ProductId) {
        let slot = RedisCluster::key_slot(&redis.cache().keys(product).stock);
        let on_node = per_node
            .entry(cluster.node_of_slot(slot).await)
            .or_default();
        if on_node.len() < PRODUCTS_PER_NODE {
            on_node.push(product);
        }
        let full = |products: &Vec<ProductId>| products.len() == PRODUCTS_PER_NODE;
        if per_node.len() == PRIMARIES && per_node.values().all(full) {
            return per_node.into_values().flatten().collect();
        }
    }
    unreachable!("product ids never run out")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn products_on_every_node_of_a_cluster_sell_at_once_and_every_promise_holds() {
    let cluster = RedisCluster::start(PRIMARIES).await;
    let mut drill = Drill::begin("redis_cluster").await;
    drill.use_redis(TestRedis::on_cluster(&cluster.node_urls()));
    let products = products_on_every_node(&cluster, &drill.stack.redis).await;
    let mut sales = Vec::new();
    for product in products {
        drill.stack.open_sale(product, STOCK, 1).await;
        sales.push(Sale {
            product,
            stock: STOCK,
        });
    }
    drill.start(Service::Gateway).await;
    drill.start(Service::Consumer).await;

    // Twice as many buyers as units for each product; every crowd runs from its start, so
    // all the sales are on at once.
    let crowds: Vec<_> = sales
        .iter()
        .map(|sale| drill.crowd(sale, CrowdPlan::rush(2 * STOCK as u32, 8)))
        .collect();
    let mut outcomes = Vec::new();
    for crowd in crowds {
        outcomes.push(crowd.finish().await);
    }

    for (sale, outcome) in sales.iter().zip(&outcomes) {
        assert_eq!(
            outcome.accepted().count(),
            STOCK as usize,
            "{:?} sold its stock, no more: {outcome}",
            sale.product
        );
        let audit = settle_and_audit(&drill, sale, outcome, Settle::within(SETTLE)).await;
        assert_eq!(audit.orders, STOCK as usize, "{:?}: {audit}", sale.product);
    }
}
