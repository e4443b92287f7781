//! After the purchase: orders that end in one store and not the other, found and repaired
//! (or reported) with MySQL as the truth, and the totals counting returned units.

use chrono::{Duration as Span, Utc};
use domain::{Closing, OrderStatus};
use order_store::{CloseOutcome, PaymentOutcome};
use reconcile_svc::Policy;
use reconcile_svc::report::Outcome;

use crate::helpers::{PRODUCT, STOCK, Sale, findings, reconcile};

const GRACE_SECS: &str = "1";

/// Past any `pay_by` plus the default expiry grace (60 s).
fn long_overdue() -> chrono::DateTime<Utc> {
    Utc::now() - Span::minutes(5)
}

async fn flows(sale: &Sale) -> u64 {
    sale.stack.redis.cache().flow_count(PRODUCT).await.unwrap()
}

async fn status(sale: &Sale, token: &domain::OrderToken) -> OrderStatus {
    sale.stack
        .db
        .db()
        .order(token)
        .await
        .unwrap()
        .unwrap()
        .status
}

#[tokio::test]
async fn an_overdue_confirmed_order_is_expired_and_its_unit_returned_in_both_stores() {
    let sale = Sale::open(GRACE_SECS).await;
    let awaiting = sale.sell(1).await;
    let overdue = sale.sell_due(2, long_overdue()).await;

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(
        findings(&report),
        [("overdue_unexpired", Outcome::Repaired)]
    );
    assert_eq!(
        report.discrepancies[0].order_token.as_deref(),
        Some(overdue.to_string().as_str())
    );
    assert_eq!(report.status, "repaired");
    assert_eq!(status(&sale, &overdue).await, OrderStatus::Expired);
    assert_eq!(status(&sale, &awaiting).await, OrderStatus::Confirmed);
    assert_eq!(sale.mysql_stock().await, STOCK - 1);
    assert_eq!(sale.redis_stock().await, STOCK - 1);
    assert_eq!(flows(&sale).await, 1);
    let view = sale.stack.redis.cache().order_view(&overdue).await.unwrap();
    assert_eq!(view.status, Some(OrderStatus::Expired));
    assert_eq!(report.products[0].returned_units, 1);

    let again = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(findings(&again), []);
    assert_eq!(again.status, "clean");
    assert_eq!(sale.redis_stock().await, STOCK - 1);
}

#[tokio::test]
async fn an_order_cancelled_in_mysql_whose_redis_return_was_lost_gets_its_unit_back_once() {
    let sale = Sale::open(GRACE_SECS).await;
    let token = sale.sell(1).await;
    // The cancel's process died between its two steps: MySQL closed it, Redis never heard.
    let closed = sale
        .stack
        .db
        .db()
        .close_order(&token, Closing::Cancelled)
        .await
        .unwrap();
    assert!(matches!(closed, CloseOutcome::Closed(_)), "{closed:?}");
    assert_eq!(sale.mysql_stock().await, STOCK);
    assert_eq!(sale.redis_stock().await, STOCK - 1);

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(
        findings(&report),
        [("unit_not_returned", Outcome::Repaired)]
    );
    assert_eq!(report.status, "repaired");
    assert_eq!(sale.redis_stock().await, STOCK);
    assert_eq!(flows(&sale).await, 0);
    let view = sale.stack.redis.cache().order_view(&token).await.unwrap();
    assert_eq!(
        view.tombstone.and_then(|tomb| tomb.closing()),
        Some(Closing::Cancelled)
    );
    // The totals were judged after the return: no flow left, and no drift.
    assert_eq!(report.products[0].flows, 0);
    assert_eq!(report.products[0].redis_stock, Some(STOCK));

    let again = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(findings(&again), []);
    assert_eq!(sale.redis_stock().await, STOCK, "returned once");
}

#[tokio::test]
async fn a_unit_redis_returned_for_an_order_confirmed_in_mysql_is_reported_returned_while_open() {
    let sale = Sale::open(GRACE_SECS).await;
    let token = sale.sell(1).await;
    // Redis told the order was cancelled, MySQL never: Redis may sell its unit again.
    sale.stack
        .redis
        .cache()
        .return_units(&token, Closing::Cancelled)
        .await
        .unwrap();

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(
        findings(&report),
        [("returned_while_open", Outcome::Unresolved)]
    );
    assert_eq!(report.status, "unresolved");
    let finding = &report.discrepancies[0];
    assert!(finding.detail.contains("confirmed"), "{}", finding.detail);
    assert!(finding.detail.contains("cancelled"), "{}", finding.detail);
    assert_eq!(status(&sale, &token).await, OrderStatus::Confirmed);
    assert_eq!(
        sale.mysql_stock().await,
        STOCK - 1,
        "nothing changed in MySQL"
    );
}

#[tokio::test]
async fn a_paid_order_with_a_release_is_reported_paid_but_released_and_the_run_is_unresolved() {
    let sale = Sale::open(GRACE_SECS).await;
    let token = sale.sell(1).await;
    assert!(matches!(
        sale.pay(&token, "pay-1").await,
        PaymentOutcome::Paid(_)
    ));
    // A release of the paid order's unit, as a closing would have written it.
    sale.sql(&format!(
        "INSERT INTO stock_flow (order_token, product_id, quantity, op_type) \
         VALUES ('{token}', {}, -1, 'RELEASE')",
        PRODUCT.get()
    ))
    .await;
    sale.sql("UPDATE product_stock SET stock = stock + 1").await;

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    let mut found = findings(&report);
    found.sort_by_key(|(kind, _)| *kind);
    // stock 10 + 1 paid unit - initial 10: the released unit is also MySQL drift.
    assert_eq!(
        found,
        [
            ("mysql_drift", Outcome::Unresolved),
            ("paid_but_released", Outcome::Unresolved)
        ]
    );
    let released = report
        .discrepancies
        .iter()
        .find(|f| f.kind.as_str() == "paid_but_released")
        .unwrap();
    assert_eq!(
        released.order_token.as_deref(),
        Some(token.to_string().as_str())
    );
    assert_eq!(report.status, "unresolved");
    assert!(report.unresolved() > 0, "--once exits 1");
    assert_eq!(status(&sale, &token).await, OrderStatus::Paid);
}

#[tokio::test]
async fn a_late_payment_is_listed_among_the_refunds_due_and_leaves_the_run_clean() {
    let sale = Sale::open(GRACE_SECS).await;
    let token = sale.sell(1).await;
    sale.cancel(&token).await;
    assert!(matches!(
        sale.pay(&token, "pay-late").await,
        PaymentOutcome::Closed(_)
    ));

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(findings(&report), []);
    assert_eq!(report.status, "clean");
    let product = &report.products[0];
    assert_eq!(product.refunds_due, 1);
    assert_eq!(product.refunds.len(), 1);
    let refund = &product.refunds[0];
    assert_eq!(refund.payment_id, "pay-late");
    assert_eq!(refund.order_token, token.to_string());
    let price = sale
        .stack
        .db
        .db()
        .product(PRODUCT)
        .await
        .unwrap()
        .unwrap()
        .price_cents;
    assert_eq!(refund.amount_cents, price);
    assert!(report.to_table().contains("pay-late"));
}

#[tokio::test]
async fn after_a_mixed_sale_both_equations_hold_and_the_run_is_clean() {
    let sale = Sale::open(GRACE_SECS).await;
    let paid = [sale.sell(1).await, sale.sell(2).await];
    let cancelled = [sale.sell(3).await, sale.sell(4).await];
    let expired = sale.sell_due(5, Utc::now() - Span::seconds(1)).await;
    let awaiting = sale.sell(6).await;
    for (n, token) in paid.iter().enumerate() {
        let outcome = sale.pay(token, &format!("pay-{n}")).await;
        assert!(matches!(outcome, PaymentOutcome::Paid(_)), "{outcome:?}");
    }
    for token in &cancelled {
        sale.cancel(token).await;
    }
    // Its deadline message came: expired by the live path, not by reconcile's sweep.
    let ending = order_lifecycle::close(
        sale.stack.db.db(),
        sale.stack.redis.cache(),
        &expired,
        Closing::Expired,
    )
    .await
    .unwrap();
    assert!(
        matches!(ending, order_lifecycle::Ending::Now(_)),
        "{ending:?}"
    );
    assert_eq!(status(&sale, &awaiting).await, OrderStatus::Confirmed);

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(findings(&report), []);
    assert_eq!(report.status, "clean");
    let p = &report.products[0];
    let (redis, mysql) = (p.redis_stock.unwrap(), p.mysql_stock.unwrap());
    // Redis: stock + the open flows (2 paid, 1 awaiting) = initial.
    assert_eq!((redis, p.flows, p.flow_units), (STOCK - 3, 3, 3));
    assert_eq!(redis + p.flow_units, STOCK);
    // MySQL: stock + the units of orders neither cancelled nor expired = initial.
    assert_eq!((mysql, p.ordered_units), (STOCK - 3, 3));
    assert_eq!(mysql + p.ordered_units, STOCK);
    assert_eq!((p.paid_orders, p.paid_units), (2, 2));
    assert_eq!(p.returned_units, 3);
    assert_eq!(p.refunds_due, 0);
    assert!(!p.redis_live);
}
