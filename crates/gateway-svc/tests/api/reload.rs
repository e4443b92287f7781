//! Redis loses a product in the middle of a sale: the gateway refuses to sell it, and an
//! admin reload rebuilds it from MySQL without selling a unit twice — one reload at a time,
//! however many gateways share a PID.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::{Response, StatusCode};
use serde_json::{Value, json};
use test_support::service::InProcessService;

use crate::helpers::{ADMIN, TestApp, assert_error, body, spawn_app_with_consumer_and};

const CONFIRMED_WITHIN: Duration = Duration::from_secs(30);

fn lose_redis_data(app: &TestApp) {
    let lost = app.stack.redis.delete_all_keys().expect("delete the keys");
    assert!(lost > 0, "the sale wrote keys");
}

async fn reload(app: &TestApp, product: u64) -> Response {
    app.client
        .post(format!(
            "{}/admin/v1/products/{product}/reload",
            app.address
        ))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("the gateway answers")
}

/// Buys one unit for `user`; returns the order token of a 202.
async fn bought(app: &TestApp, user: u64, product: u64) -> String {
    let response = app.buy(user, product).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    body(response).await["order_token"]
        .as_str()
        .expect("an order token")
        .to_owned()
}

async fn mysql_orders(app: &TestApp, product: u64) -> i64 {
    app.admin_view(product).await["orders"]
        .as_i64()
        .expect("orders")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_product_redis_lost_is_not_sold_until_a_reload_rebuilds_it_from_mysql() {
    let kept = Duration::from_millis(200);
    let kept_ms = kept.as_millis().to_string();
    let app =
        spawn_app_with_consumer_and(&[("SECKILL_GATEWAY__SALE_WINDOW_CACHE_MS", &kept_ms)]).await;
    let product = 7101;
    app.open_sale(product, 10, 1).await;
    let mut sold = Vec::new();
    for user in 1..=4 {
        let order = bought(&app, user, product).await;
        app.wait_confirmed(user, &order, CONFIRMED_WITHIN).await;
        sold.push((user, order));
    }

    let held_through_the_loss = app.token(5, product).await;
    lose_redis_data(&app);
    // No purchase, even with a token issued before: Redis cannot say what is left. Nor a
    // token, once the window this gateway remembered is up.
    assert_error(
        app.purchase(5, product, &held_through_the_loss, 1).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "UNAVAILABLE",
    )
    .await;
    tokio::time::sleep(kept * 2).await;
    assert_error(
        app.request_token(5, product).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "UNAVAILABLE",
    )
    .await;

    let response = reload(&app, product).await;
    assert_eq!(response.status(), StatusCode::OK);
    let reloaded = body(response).await;
    assert_eq!(reloaded["orders_restored"], 4);
    assert_eq!(
        reloaded["stock"], 6,
        "10 units, 4 of them ordered: {reloaded}"
    );

    // What the buyers did before the loss still holds: their orders show, and the
    // per-user limit of 1 refuses a second unit.
    for (user, order) in &sold {
        assert_eq!(
            body(app.order_status(*user, order).await).await["status"],
            "confirmed"
        );
        assert_error(
            app.buy(*user, product).await,
            StatusCode::CONFLICT,
            "LIMIT_EXCEEDED",
        )
        .await;
    }
    let mut accepted = 0;
    for user in 5..=20 {
        if app.buy(user, product).await.status() == StatusCode::ACCEPTED {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 6, "exactly the units MySQL had left are sold");
    let view = app.admin_view(product).await;
    assert_eq!(view["redis_stock"], 0);
    assert_eq!(view["flows"], 10);

    assert_error(
        reload(&app, product).await,
        StatusCode::CONFLICT,
        "PRODUCT_LOADED",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_waits_for_orders_still_queued_and_counts_them_as_sold() {
    let mut app = spawn_app_with_consumer_and(&[("SECKILL_GATEWAY__RELOAD_DRAIN_SECS", "2")]).await;
    let product = 7102;
    app.open_sale(product, 5, 1).await;
    let first = bought(&app, 1, product).await;
    app.wait_confirmed(1, &first, CONFIRMED_WITHIN).await;

    // The consumers stop; two more orders wait in the queue when Redis loses the product.
    app.consumer.take();
    bought(&app, 2, product).await;
    bought(&app, 3, product).await;
    lose_redis_data(&app);

    assert_error(
        reload(&app, product).await,
        StatusCode::CONFLICT,
        "ORDERS_IN_FLIGHT",
    )
    .await;
    assert_error(
        app.request_token(4, product).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "UNAVAILABLE",
    )
    .await;

    app.start_consumer().await;
    // The consumer catches up within the drain time, or the next reload does.
    let deadline = tokio::time::Instant::now() + CONFIRMED_WITHIN;
    let reloaded = loop {
        let response = reload(&app, product).await;
        if response.status() == StatusCode::OK {
            break body(response).await;
        }
        assert_error(response, StatusCode::CONFLICT, "ORDERS_IN_FLIGHT").await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "the queue never drained"
        );
    };
    assert_eq!(reloaded["orders_restored"], 3);
    assert_eq!(
        reloaded["stock"], 2,
        "the queued orders' units stay sold: {reloaded}"
    );
    assert_eq!(mysql_orders(&app, product).await, 3);

    let mut accepted = 0;
    for user in 4..=10 {
        if app.buy(user, product).await.status() == StatusCode::ACCEPTED {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 2);
}

/// How long a reload may take to be refused for a lease another gateway holds: it is one
/// MySQL statement, where a reload that got the lease waits for the queue to drain.
const REFUSED_AT_ONCE: Duration = Duration::from_secs(5);

/// A second gateway on `app`'s stack, in this same process: so with the same PID, as two
/// replicas in containers both are PID 1.
async fn second_gateway(app: &TestApp, extra: &[(&str, &str)]) -> InProcessService {
    let settings = app.stack.settings(extra);
    InProcessService::start("gateway-2", move |shutdown, port| async move {
        let gateway = gateway_svc::Application::build(settings).await?;
        let _ = port.send(gateway.port());
        gateway.run_until_stopped(shutdown).await
    })
    .await
}

/// Buyers one after the other, each through the next gateway in turn, until `stop`;
/// returns the order tokens of the purchases answered 202.
async fn crowd(
    gateways: Vec<String>,
    product: u64,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
) -> Vec<String> {
    let client = reqwest::Client::new();
    let mut orders = Vec::new();
    for user in 1_u64.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let gateway = &gateways[user as usize % gateways.len()];
        if let Some(order) = buy_once(&client, gateway, user, product).await {
            orders.push(order);
            accepted.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    orders
}

/// A token and a purchase; the order token when the purchase is answered 202.
async fn buy_once(
    client: &reqwest::Client,
    gateway: &str,
    user: u64,
    product: u64,
) -> Option<String> {
    let token = client
        .post(format!("{gateway}/api/v1/products/{product}/tokens"))
        .header("X-User-Id", user.to_string())
        .send()
        .await
        .ok()?;
    let token = token.json::<Value>().await.ok()?["token"]
        .as_str()?
        .to_owned();
    let purchase = client
        .post(format!("{gateway}/api/v1/products/{product}/purchase"))
        .header("X-User-Id", user.to_string())
        .json(&json!({"token": token, "quantity": 1}))
        .send()
        .await
        .ok()?;
    if purchase.status() != StatusCode::ACCEPTED {
        return None;
    }
    Some(
        purchase.json::<Value>().await.ok()?["order_token"]
            .as_str()?
            .to_owned(),
    )
}

async fn reload_at(client: &reqwest::Client, gateway: &str, product: u64) -> Response {
    client
        .post(format!("{gateway}/admin/v1/products/{product}/reload"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("the gateway answers")
}

/// Waits until `count` more purchases than `from` were accepted.
async fn until_accepted(accepted: &AtomicUsize, from: usize, count: usize) {
    let deadline = tokio::time::Instant::now() + CONFIRMED_WITHIN;
    while accepted.load(Ordering::Relaxed) < from + count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the crowd bought nothing"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_of_one_pid_never_hold_a_reload_lease_together_and_the_sale_balances() {
    let drain = [("SECKILL_GATEWAY__RELOAD_DRAIN_SECS", "30")];
    let mut app = spawn_app_with_consumer_and(&drain).await;
    let second = second_gateway(&app, &drain).await;
    let product = 7103;
    let initial = 60;
    app.open_sale(product, initial, 1).await;
    let (stop, accepted) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let buyers = tokio::spawn(crowd(
        vec![app.address.clone(), second.url()],
        product,
        stop.clone(),
        accepted.clone(),
    ));
    until_accepted(&accepted, 0, 5).await;

    // The consumers stop, so orders wait in the queue and a reload waits for them: the
    // first reload holds its lease for as long as the test needs.
    app.consumer.take();
    until_accepted(&accepted, accepted.load(Ordering::Relaxed), 3).await;
    lose_redis_data(&app);

    let lease = format!("reload:{product}");
    let client = reqwest::Client::new();
    let first = tokio::spawn({
        let (client, gateway) = (client.clone(), app.address.clone());
        async move { reload_at(&client, &gateway, product).await }
    });
    let db = app.stack.db.db().clone();
    let deadline = tokio::time::Instant::now() + CONFIRMED_WITHIN;
    let holder = loop {
        if let Some(holder) = db.lease_holder(&lease).await.unwrap() {
            break holder;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first reload took no lease"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    // The second gateway, same PID, while the first reload holds the lease and waits.
    let second_reload =
        tokio::time::timeout(REFUSED_AT_ONCE, reload_at(&client, &second.url(), product))
            .await
            .expect("refused at once, not let in to wait for the queue beside the first");
    assert_error(
        second_reload,
        StatusCode::SERVICE_UNAVAILABLE,
        "UNAVAILABLE",
    )
    .await;
    assert_eq!(
        db.lease_holder(&lease).await.unwrap().as_deref(),
        Some(&*holder)
    );

    app.start_consumer().await;
    let first = first.await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(db.lease_holder(&lease).await.unwrap(), None, "released");
    let after_reload = accepted.load(Ordering::Relaxed);
    until_accepted(&accepted, after_reload, 3).await;
    // A retried reload, on either gateway, finds the product on sale and changes nothing.
    for gateway in [app.address.clone(), second.url()] {
        assert_error(
            reload_at(&client, &gateway, product).await,
            StatusCode::CONFLICT,
            "PRODUCT_LOADED",
        )
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    let orders = buyers.await.unwrap();

    assert_sale_balances(&app, product, initial, &orders).await;
}

/// Once the consumer wrote every order: each purchase answered 202 has its order, MySQL
/// stock + Σ orders = initial, and Redis stock + Σ flows = initial, with one flow per order.
async fn assert_sale_balances(app: &TestApp, product: u64, initial: i64, accepted: &[String]) {
    let db = app.stack.db.db();
    let id = domain::ProductId(product);
    for order in accepted {
        let token: domain::OrderToken = order.parse().expect("an order token");
        let deadline = tokio::time::Instant::now() + CONFIRMED_WITHIN;
        while db.order(&token).await.unwrap().is_none() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no order for the 202 {order}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let (mysql_stock, orders) = db.stock_and_order_count(id).await.unwrap();
    let ordered = db.ordered_units(id).await.unwrap();
    assert_eq!(orders, accepted.len() as i64, "an order per 202, no other");
    assert_eq!(
        mysql_stock.unwrap() + ordered,
        initial,
        "MySQL stock + Σ orders = initial"
    );
    let cache = app.stack.redis.cache();
    let redis_stock = cache.stock(id).await.unwrap().unwrap();
    let flows = cache.flow_count(id).await.unwrap();
    assert_eq!(flows, accepted.len() as u64, "one flow per order");
    assert_eq!(
        redis_stock + ordered,
        initial,
        "Redis stock + Σ flows = initial"
    );
}
