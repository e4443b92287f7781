use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use domain::{FlowRecord, OrderToken, PreDeductOutcome, ProductId, UserId};
use stock_cache::{LoadMode, LoadSpec, StockCache};
use test_support::redis::TestRedis;

/// Each test has a prefix of its own, so one product id serves them all.
pub const PRODUCT: ProductId = ProductId(7);

pub fn now_ms() -> i64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(since_epoch.as_millis()).unwrap()
}

/// A fresh sale that is open now and never closes.
pub fn open_sale(stock: i64, per_user_limit: u32) -> LoadSpec {
    LoadSpec {
        initial_stock: stock,
        per_user_limit,
        starts_at_ms: 0,
        ends_at_ms: 0,
        sellable_stock: stock,
        mode: LoadMode::Fresh,
    }
}

/// A new prefix with [`PRODUCT`] loaded and on sale.
pub async fn on_sale(stock: i64, per_user_limit: u32) -> TestRedis {
    let redis = TestRedis::new();
    redis
        .cache()
        .load_product(PRODUCT, &open_sale(stock, per_user_limit))
        .await
        .unwrap();
    redis
}

pub fn token() -> OrderToken {
    OrderToken::random(PRODUCT)
}

/// A new token that reserved `quantity` for `user`; panics on any other answer.
pub async fn reserve(cache: &StockCache, user: u64, quantity: u32) -> OrderToken {
    let token = token();
    match cache
        .pre_deduct(&token, UserId(user), quantity)
        .await
        .unwrap()
    {
        PreDeductOutcome::Reserved { .. } => token,
        other => panic!("user {user} asked for {quantity}: {other:?}"),
    }
}

/// Every key of a product as Redis holds it, to show that a call wrote nothing.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub stock: Option<String>,
    pub meta: HashMap<String, String>,
    pub flow: HashMap<String, String>,
    pub users: HashMap<String, String>,
    pub result: HashMap<String, String>,
    pub tomb: HashMap<String, String>,
}

pub async fn snapshot(redis: &TestRedis, product: ProductId) -> Snapshot {
    let keys = redis.cache().keys(product);
    let mut conn = redis.connection().await;
    let (stock, meta, flow, users, result, tomb) = ::redis::pipe()
        .atomic()
        .get(&keys.stock)
        .hgetall(&keys.meta)
        .hgetall(&keys.flow)
        .hgetall(&keys.users)
        .hgetall(&keys.result)
        .hgetall(&keys.tomb)
        .query_async(&mut conn)
        .await
        .unwrap();
    Snapshot {
        stock,
        meta,
        flow,
        users,
        result,
        tomb,
    }
}

/// A whole HSCAN walk: every (token, flow) seen, the unreadable fields, and how many pages.
pub struct Walk {
    pub flows: Vec<(OrderToken, FlowRecord)>,
    pub unreadable: Vec<String>,
    pub pages: usize,
}

pub async fn walk_flows(cache: &StockCache, product: ProductId, count: usize) -> Walk {
    let mut walk = Walk {
        flows: Vec::new(),
        unreadable: Vec::new(),
        pages: 0,
    };
    let mut cursor = 0;
    loop {
        let page = cache.scan_flows(product, cursor, count).await.unwrap();
        walk.pages += 1;
        walk.flows.extend(page.flows);
        walk.unreadable.extend(page.unreadable);
        if page.next_cursor == 0 {
            return walk;
        }
        cursor = page.next_cursor;
    }
}

/// Σ quantity over the product's flows, each token counted once (HSCAN may repeat one).
pub async fn reserved_units(cache: &StockCache, product: ProductId) -> i64 {
    let walk = walk_flows(cache, product, 100).await;
    assert!(walk.unreadable.is_empty(), "{:?}", walk.unreadable);
    let unique: HashMap<_, _> = walk.flows.into_iter().collect();
    unique.values().map(|flow| i64::from(flow.quantity)).sum()
}

/// Redis stock + Σ flows must always equal the stock the sale was loaded with.
pub async fn assert_stock_is_conserved(cache: &StockCache, product: ProductId, initial: i64) {
    let stock = cache
        .stock(product)
        .await
        .unwrap()
        .expect("stock is loaded");
    assert!(stock >= 0, "stock went below zero: {stock}");
    let reserved = reserved_units(cache, product).await;
    assert_eq!(
        stock + reserved,
        initial,
        "stock {stock} + flows {reserved}"
    );
}

/// The flows' (stock_before → stock_after) steps tile [stock, initial] with no gap and no
/// overlap: each reservation saw the stock the one before it left.
pub fn assert_flows_tile_the_stock(flows: &[FlowRecord], stock: i64, initial: i64) {
    let mut steps: Vec<_> = flows
        .iter()
        .map(|f| (f.stock_before, f.stock_after, f.quantity))
        .collect();
    steps.sort_unstable_by(|a, b| b.cmp(a));
    let mut expected_before = initial;
    for (before, after, quantity) in steps {
        assert_eq!(before, expected_before, "a gap or an overlap in the flows");
        assert_eq!(before - after, i64::from(quantity));
        expected_before = after;
    }
    assert_eq!(expected_before, stock);
}

/// Redis loses the product's meta and stock, as when it is restarted without them; the
/// flows stay, as a reload writes them back before loading.
pub async fn lose_meta_and_stock(redis: &TestRedis) {
    let keys = redis.cache().keys(PRODUCT);
    let mut conn = redis.connection().await;
    let () = ::redis::cmd("DEL")
        .arg(&keys.meta)
        .arg(&keys.stock)
        .query_async(&mut conn)
        .await
        .unwrap();
}
