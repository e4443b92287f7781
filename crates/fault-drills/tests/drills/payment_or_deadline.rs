//! A payment callback and the payment deadline reach the same order in the same
//! millisecond, for 1,000 orders whose `pay_by` has just passed. The payment comes through
//! the gateway (signed, as the provider sends it); the expiry is `order_lifecycle::close`,
//! which the consumer's expirer runs when a deadline comes due, run here by the drill so
//! that it starts at a moment of the drill's choosing against the drill's MySQL and Redis.
//!
//! Each order must end exactly once, paid or expired, and each loser be told so in the
//! contract's words: a payment that lost is answered 409 `ORDER_CLOSED` and recorded as a
//! refund due; an expiry that lost reads the order paid. A paid order keeps its units, an
//! expired one gives them back, once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::{Closing, OrderStatus, OrderToken};
use fault_drills::{CrowdPlan, Drill, Service, Settle, settle_and_audit};
use order_lifecycle::Ending;
use reqwest::StatusCode;
use tokio::task::JoinSet;

use crate::helpers::{
    CROWD_PROGRESS, PAYMENT_WINDOW, SETTLE, client, notify_payment, orders_in, price_sale,
    until_orders,
};

const ORDERS: usize = 1000;
/// Room for 1,000 purchases and their writing (a few seconds) before the first deadline.
const WINDOW_SECS: u64 = 15;
/// One race starts every this often: 1,000 over 3 s, so that the gateway takes each
/// payment as it comes rather than queueing them, which would decide every race for the
/// expiry.
const BETWEEN_RACES: Duration = Duration::from_millis(3);
/// Connections of the drill's own expiries: as many as races overlap.
const EXPIRY_CONNECTIONS: usize = 16;

/// How one race went, as each side was told.
#[derive(Debug)]
struct Race {
    order: String,
    payment: (StatusCode, String),
    expiry: Result<&'static str, String>,
}

/// The expiry's answer, by its kind and, when it lost, what it read.
fn expiry_said(ending: &Ending) -> &'static str {
    match ending {
        Ending::Now(_) => "expired",
        Ending::Before(row) if row.status == OrderStatus::Paid => "lost to the payment",
        Ending::Before(_) => "lost to another ending",
        Ending::NotDue(_) => "not due",
        Ending::Unknown => "unknown order",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn a_payment_and_the_deadline_at_the_same_moment_end_each_order_once() {
    let mut drill = Drill::begin("payment_or_deadline").await;
    drill.set_env(PAYMENT_WINDOW, &WINDOW_SECS.to_string());
    // The gateway's payments must not queue on a handful of connections.
    drill.set_env("SECKILL_MYSQL__POOL_SIZE", "16");
    drill.start(Service::Gateway).await;
    drill.start(Service::Consumer).await;
    let sale = drill.open_sale(ORDERS as i64).await;
    price_sale(&drill, sale.product.get()).await;
    let outcome = drill
        .crowd(&sale, CrowdPlan::rush(ORDERS as u32, 64))
        .finish()
        .await;
    let orders = outcome.accepted_tokens();
    assert_eq!(orders.len(), ORDERS, "every unit is sold: {outcome}");
    until_orders(&drill, "confirmed", ORDERS as i64, CROWD_PROGRESS).await;
    // The consumer's own expirer must not decide the races before they start; its
    // deadlines stay in the broker.
    drill
        .terminate(Service::Consumer, Duration::from_secs(30))
        .await;
    assert_eq!(
        orders_in(&drill, "expired").await,
        0,
        "no deadline came yet"
    );
    let waited = Instant::now();
    crate::helpers::until_orders_due(&drill, Duration::from_secs(WINDOW_SECS + 10)).await;
    eprintln!("waited {:?} for every pay_by to pass", waited.elapsed());

    let db = order_store::Db::connect(drill.stack.db.url(), EXPIRY_CONNECTIONS)
        .expect("a pool on the drill's database");
    let cache = drill.stack.redis.cache().clone();
    let http = client();
    let drill = Arc::new(drill);
    let started = tokio::time::Instant::now() + Duration::from_millis(100);
    let mut races = JoinSet::new();
    for (n, order) in orders.iter().enumerate() {
        let at = started + BETWEEN_RACES * n as u32;
        // Which side leaves first, by up to 2 ms either way: the payment's HTTP hop is
        // the longer, so an even start would hand most races to the expiry.
        let (pay_after, expire_after) = match n % 5 {
            0 => (0, 2),
            1 => (0, 1),
            2 => (0, 0),
            3 => (1, 0),
            _ => (2, 0),
        };
        let (db, cache, http, drill, order) = (
            db.clone(),
            cache.clone(),
            http.clone(),
            Arc::clone(&drill),
            order.clone(),
        );
        races.spawn(async move {
            tokio::time::sleep_until(at).await;
            let token: OrderToken = order.parse().expect("an order token");
            let (payment, expiry) = tokio::join!(
                async {
                    tokio::time::sleep(Duration::from_millis(pay_after)).await;
                    let (status, body) =
                        notify_payment(&http, &drill, &format!("race-{n}"), &order).await;
                    let said = body["status"]
                        .as_str()
                        .or(body["error"]["code"].as_str())
                        .unwrap_or_default()
                        .to_owned();
                    (status, said)
                },
                async {
                    tokio::time::sleep(Duration::from_millis(expire_after)).await;
                    order_lifecycle::close(&db, &cache, &token, Closing::Expired)
                        .await
                        .map(|ending| expiry_said(&ending))
                        .map_err(|e| e.to_string())
                }
            );
            Race {
                order,
                payment,
                expiry,
            }
        });
    }
    let mut results = Vec::with_capacity(ORDERS);
    while let Some(race) = races.join_next().await {
        results.push(race.expect("a race does not panic"));
    }
    let raced_in = started.elapsed();
    let drill = Arc::into_inner(drill).expect("every race is over");

    let statuses = final_statuses(&drill).await;
    let mut broken = Vec::new();
    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    for race in &results {
        let ended = statuses.get(&race.order).map(String::as_str);
        let told = match (&race.payment, &race.expiry, ended) {
            ((StatusCode::OK, said), Ok("lost to the payment"), Some("paid")) if said == "paid" => {
                "paid"
            }
            ((StatusCode::CONFLICT, said), Ok("expired"), Some("expired"))
                if said == "ORDER_CLOSED" =>
            {
                "expired"
            }
            _ => {
                broken.push(format!("{race:?}, ended {ended:?}"));
                continue;
            }
        };
        *tally.entry(told).or_default() += 1;
    }
    assert!(
        broken.is_empty(),
        "{} of {ORDERS} races did not end once with both sides told how, e.g. {:#?}",
        broken.len(),
        &broken[..broken.len().min(5)]
    );
    let (paid, expired) = (
        tally.get("paid").copied().unwrap_or(0),
        tally.get("expired").copied().unwrap_or(0),
    );
    assert!(
        paid > 0 && expired > 0,
        "the races were not close: {paid} paid, {expired} expired"
    );

    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(SETTLE)).await;
    assert_eq!(
        (
            audit.count(OrderStatus::Paid),
            audit.count(OrderStatus::Expired)
        ),
        (paid, expired),
        "{audit}"
    );
    assert_eq!(
        (audit.payments_applied, audit.refunds_due),
        (paid, expired),
        "every payment that lost is a refund due: {audit}"
    );
    assert_eq!(
        audit.redis_stock,
        Some(expired as i64),
        "the expired orders' units, and only theirs, are back on sale: {audit}"
    );
    eprintln!(
        "payment or deadline: {ORDERS} races in {raced_in:?}: {paid} paid, {expired} expired; \
         settled in {:?}; drill took {:?}",
        audit.settled_after,
        drill.elapsed()
    );
}

/// Every order's status in MySQL, by token.
async fn final_statuses(drill: &Drill) -> BTreeMap<String, String> {
    use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Varchar)]
        order_token: String,
        #[diesel(sql_type = diesel::sql_types::Varchar)]
        status: String,
    }
    let mut conn = AsyncMysqlConnection::establish(drill.stack.db.url())
        .await
        .expect("the drill's database answers");
    diesel::sql_query("SELECT order_token, status FROM orders")
        .load::<Row>(&mut conn)
        .await
        .expect("the orders are read")
        .into_iter()
        .map(|row| (row.order_token, row.status))
        .collect()
}
