//! Redis loses everything while confirmed orders await their payment, and an operator
//! reloads the product from MySQL (`POST /admin/v1/products/{id}/reload`). The reload must
//! bring those orders back as they are — open, units held — so that what comes after
//! works as if nothing had happened: a cancel gives its units back, a payment keeps them, a
//! deadline expires the rest and gives theirs back; each once.

use std::time::Duration;

use domain::OrderStatus;
use fault_drills::stack::Component;
use fault_drills::{CrowdPlan, Drill, Service, Settle, settle_and_audit};
use reqwest::StatusCode;

use crate::helpers::{
    CROWD_PROGRESS, PAYMENT_WINDOW, SETTLE, cancel, client, notify_payment, orders_in, price_sale,
    reload_until_done, until_orders,
};

const STOCK: i64 = 40;
/// Buyers, in three equal parts: who cancel, who pay, who let the deadline come.
const BUYERS: usize = 30;
const PART: usize = BUYERS / 3;
/// Room for the sale, the loss and the reload before the deadline; the expiries then come
/// without the drill waiting long for them.
const WINDOW_SECS: &str = "20";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orders_awaiting_payment_through_a_redis_loss_still_cancel_pay_and_expire_once() {
    let mut drill = Drill::begin("redis_loss_awaiting_payment").await;
    drill.set_env(PAYMENT_WINDOW, WINDOW_SECS);
    drill.start(Service::Gateway).await;
    drill.start(Service::Consumer).await;
    let sale = drill.open_sale(STOCK).await;
    price_sale(&drill, sale.product.get()).await;
    let outcome = drill
        .crowd(&sale, CrowdPlan::rush(BUYERS as u32, 8))
        .finish()
        .await;
    let buyers: Vec<(u64, String)> = outcome
        .accepted()
        .map(|a| (a.user, a.order_token().expect("accepted").to_owned()))
        .collect();
    assert_eq!(buyers.len(), BUYERS, "{outcome}");
    until_orders(&drill, "confirmed", BUYERS as i64, CROWD_PROGRESS).await;

    drill.wipe_component(Component::Redis).await;
    let reloaded = reload_until_done(&drill, sale.product.get()).await;
    assert_eq!(
        (
            reloaded["orders_restored"].as_u64(),
            reloaded["stock"].as_i64()
        ),
        (Some(BUYERS as u64), Some(STOCK - BUYERS as i64)),
        "the reload restores every open order with its units held: {reloaded}"
    );

    let http = client();
    let (cancelling, rest) = buyers.split_at(PART);
    let (paying, expiring) = rest.split_at(PART);
    for (user, order) in cancelling {
        let (status, body) = cancel(&http, &drill, *user, order).await;
        assert_eq!(
            (status, body["status"].as_str()),
            (StatusCode::OK, Some("cancelled")),
            "{body}"
        );
    }
    for (n, (_, order)) in paying.iter().enumerate() {
        let (status, body) = notify_payment(&http, &drill, &format!("pay-{n}"), order).await;
        assert_eq!(
            (status, body["status"].as_str()),
            (StatusCode::OK, Some("paid")),
            "{body}"
        );
    }
    // Asked again, each answers that the order has ended, and gives back nothing more.
    let (user, cancelled) = &cancelling[0];
    let (status, body) = cancel(&http, &drill, *user, cancelled).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("ORDER_CLOSED")),
        "{body}"
    );
    let (status, body) = notify_payment(&http, &drill, "pay-late", cancelled).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("ORDER_CLOSED")),
        "a payment for a cancelled order is refused, and due for refund: {body}"
    );
    assert_eq!(
        orders_in(&drill, "expired").await,
        0,
        "no deadline came before the cancels and payments"
    );

    let window = Duration::from_secs(WINDOW_SECS.parse().expect("a number"));
    until_orders(&drill, "expired", PART as i64, window + CROWD_PROGRESS).await;
    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(SETTLE)).await;

    assert_eq!(
        (
            audit.count(OrderStatus::Cancelled),
            audit.count(OrderStatus::Paid),
            audit.count(OrderStatus::Expired),
        ),
        (PART, PART, PART),
        "{audit}"
    );
    assert_eq!(
        audit.redis_stock,
        Some(STOCK - PART as i64),
        "only the paid units are sold: {audit}"
    );
    assert_eq!(
        (audit.payments_applied, audit.refunds_due),
        (PART, 1),
        "{audit}"
    );
    for (_, order) in expiring {
        let view = drill
            .stack
            .redis
            .cache()
            .order_view(&order.parse().expect("an order token"))
            .await
            .expect("Redis answers");
        assert_eq!(view.status, Some(OrderStatus::Expired), "{order}: {view:?}");
    }
    eprintln!(
        "redis loss while awaiting payment: the reload restored {} orders; {PART} cancelled, \
         {PART} paid, {PART} expired; settled in {:?}; drill took {:?}",
        reloaded["orders_restored"],
        audit.settled_after,
        drill.elapsed()
    );
}
