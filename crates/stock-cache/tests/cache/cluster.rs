//! `redis.mode = "cluster"`: the cache on a Redis Cluster of the test's own, three primaries
//! on free loopback ports. Each product's keys share a hash tag, so each of its scripts runs
//! on the one node that owns its slot; products spread over the nodes sell at once.

use std::collections::BTreeMap;
use std::time::Duration;

use domain::{OrderToken, PreDeductOutcome, ProductId, UserId};
use futures::future::join_all;
use stock_cache::StockCache;
use test_support::redis::TestRedis;
use test_support::redis_topology::RedisCluster;

use crate::helpers::open_sale;

const PRIMARIES: usize = 3;

/// What a crowd of `buyers` (one unit each, users 1..=buyers) got from one product's sale.
#[derive(Debug, Default)]
struct Sold {
    reserved: u64,
    sold_out: u64,
    errors: Vec<String>,
}

/// `buyers` buyers, `at_once` of them in flight at a time, each asking for one unit.
async fn crowd(cache: &StockCache, product: ProductId, buyers: u64, at_once: u64) -> Sold {
    let mut sold = Sold::default();
    for wave in (1..=buyers).collect::<Vec<_>>().chunks(at_once as usize) {
        let answers = join_all(wave.iter().map(|user| {
            let token = OrderToken::random(product);
            async move { cache.pre_deduct(&token, UserId(*user), 1).await }
        }))
        .await;
        for answer in answers {
            match answer {
                Ok(PreDeductOutcome::Reserved { .. }) => sold.reserved += 1,
                Ok(PreDeductOutcome::SoldOut { .. }) => sold.sold_out += 1,
                Ok(other) => sold.errors.push(format!("{other:?}")),
                Err(error) => sold.errors.push(error.to_string()),
            }
        }
    }
    sold
}

/// Stock left, flow records and units held by buyers: what Redis says was sold.
async fn ledger(cache: &StockCache, product: ProductId) -> (Option<i64>, u64, i64) {
    let stock = cache.stock(product).await.unwrap();
    let flows = cache.flow_count(product).await.unwrap();
    let held = cache.units_by_buyer(product).await.unwrap().values().sum();
    (stock, flows, held)
}

async fn owner(cluster: &RedisCluster, cache: &StockCache, product: ProductId) -> String {
    let slot = RedisCluster::key_slot(&cache.keys(product).stock);
    cluster.node_of_slot(slot).await
}

/// The first product ids whose slots make four on each node (the test's prefix is random, so
/// which ids those are changes from run to run).
async fn four_products_on_each_node(cluster: &RedisCluster, cache: &StockCache) -> Vec<ProductId> {
    let mut per_node: BTreeMap<String, Vec<ProductId>> = BTreeMap::new();
    for product in (1..).map(ProductId) {
        let on_node = per_node
            .entry(owner(cluster, cache, product).await)
            .or_default();
        if on_node.len() < 4 {
            on_node.push(product);
        }
        if per_node.len() == PRIMARIES && per_node.values().all(|products| products.len() == 4) {
            return per_node.into_values().flatten().collect();
        }
    }
    unreachable!("product ids never run out")
}

#[tokio::test(flavor = "multi_thread")]
async fn products_on_every_one_of_three_primaries_sell_at_once_and_every_invariant_holds() {
    const STOCK: i64 = 20;
    const BUYERS: u64 = 50;
    let cluster = RedisCluster::start(PRIMARIES).await;
    let redis = TestRedis::on_cluster(&cluster.node_urls());
    let cache = redis.cache();
    let products = four_products_on_each_node(&cluster, cache).await;
    for product in &products {
        cache
            .load_product(*product, &open_sale(STOCK, 1))
            .await
            .unwrap();
    }

    let sales = join_all(
        products
            .iter()
            .map(|product| crowd(cache, *product, BUYERS, 10)),
    )
    .await;

    for (product, sold) in products.iter().zip(sales) {
        assert!(sold.errors.is_empty(), "{product:?}: {:?}", sold.errors);
        assert_eq!(
            sold.reserved, STOCK as u64,
            "{product:?} sold its stock, no more"
        );
        assert_eq!(sold.sold_out, BUYERS - STOCK as u64);
        assert_eq!(
            ledger(cache, *product).await,
            (Some(0), STOCK as u64, STOCK),
            "{product:?}: stock, flows and buyers' units agree"
        );
    }
    assert_eq!(
        cache.epochs(&products).await.unwrap().len(),
        products.len(),
        "a read across products crosses slots, and still answers"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scripts_are_loaded_on_every_primary() {
    let cluster = RedisCluster::start(PRIMARIES).await;
    let redis = TestRedis::on_cluster(&cluster.node_urls());
    let cache = redis.cache();
    cache
        .load_product(ProductId(1), &open_sale(5, 1))
        .await
        .unwrap();
    let pre_deduct = redis::Script::new(include_str!("../../../../lua/pre_deduct.lua"));
    crowd(cache, ProductId(1), 1, 1).await;

    for node in cluster.node_urls() {
        let mut conn = redis::Client::open(node.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let loaded: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(pre_deduct.get_hash())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(loaded, [true], "pre_deduct.lua on {node}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_product_whose_slot_moves_mid_sale_sells_on_through_ask_and_moved() {
    const STOCK: i64 = 150;
    const BUYERS: u64 = 300;
    let cluster = RedisCluster::start(PRIMARIES).await;
    let redis = TestRedis::on_cluster(&cluster.node_urls());
    let cache = redis.cache();
    let product = ProductId(7);
    cache
        .load_product(product, &open_sale(STOCK, 1))
        .await
        .unwrap();
    let slot = RedisCluster::key_slot(&cache.keys(product).stock);
    let from = cluster.node_of_slot(slot).await;
    let to = cluster
        .node_urls()
        .into_iter()
        .find(|node| *node != from)
        .unwrap();

    let sale = tokio::spawn({
        let cache = cache.clone();
        async move { crowd(&cache, product, BUYERS, 4).await }
    });
    test_support::eventually(Duration::from_secs(20), "the sale under way", || async {
        (cache.flow_count(product).await.unwrap() >= 20).then_some(())
    })
    .await;
    cluster.move_slot(slot, &to).await;
    let sold = sale.await.unwrap();

    assert_eq!(cluster.node_of_slot(slot).await, to);
    assert!(sold.errors.is_empty(), "{:?}", sold.errors);
    assert_eq!(sold.reserved, STOCK as u64);
    assert_eq!(sold.sold_out, BUYERS - STOCK as u64);
    assert_eq!(
        ledger(cache, product).await,
        (Some(0), STOCK as u64, STOCK),
        "stock, flows and buyers' units agree on the node the product moved to"
    );
}
