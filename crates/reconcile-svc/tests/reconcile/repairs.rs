use std::time::Duration;

use reconcile_svc::Policy;
use reconcile_svc::report::Outcome;

use crate::helpers::{STOCK, Sale, findings, reconcile};

const GRACE_SECS: &str = "1";
const PAST_GRACE: Duration = Duration::from_millis(1_200);

#[tokio::test]
async fn a_flow_without_an_order_is_republished_and_its_order_arrives() {
    let sale = Sale::open(GRACE_SECS).await;
    sale.sell(1).await;
    let lost = sale.reserve(2).await;
    tokio::time::sleep(PAST_GRACE).await;

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(findings(&report), [("missing_order", Outcome::Repaired)]);
    assert_eq!(
        report.discrepancies[0].order_token.as_deref(),
        Some(lost.to_string().as_str())
    );

    sale.consume_until_ordered(&lost).await;
    assert_eq!(sale.mysql_stock().await, STOCK - 2);
    assert_eq!(sale.redis_stock().await, STOCK - 2);

    let again = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(findings(&again), []);
    assert_eq!(again.status, "clean");
}

#[tokio::test]
async fn the_restore_policy_puts_a_lost_unit_back_on_sale_once() {
    let sale = Sale::open(GRACE_SECS).await;
    sale.reserve(2).await;
    tokio::time::sleep(PAST_GRACE).await;

    let report = reconcile(sale.settings(), Policy::Restore).await.unwrap();
    assert_eq!(findings(&report), [("missing_order", Outcome::Repaired)]);
    assert_eq!(sale.redis_stock().await, STOCK);
    assert_eq!(
        sale.stack
            .redis
            .cache()
            .flow_count(crate::helpers::PRODUCT)
            .await
            .unwrap(),
        0
    );

    let again = reconcile(sale.settings(), Policy::Restore).await.unwrap();
    assert_eq!(findings(&again), []);
}

#[tokio::test]
async fn the_report_policy_leaves_a_missing_order_unresolved() {
    let sale = Sale::open(GRACE_SECS).await;
    sale.reserve(2).await;
    tokio::time::sleep(PAST_GRACE).await;

    let report = reconcile(sale.settings(), Policy::Report).await.unwrap();
    assert_eq!(findings(&report), [("missing_order", Outcome::Unresolved)]);
    assert_eq!(report.unresolved(), 1);
    assert_eq!(report.status, "unresolved");
    assert_eq!(sale.redis_stock().await, STOCK - 1);
}

#[tokio::test]
async fn a_flow_younger_than_the_grace_window_is_left_alone() {
    let sale = Sale::open("600").await;
    sale.reserve(2).await;
    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(findings(&report), []);
    assert_eq!(report.products[0].in_flight, 1);
}

#[tokio::test]
async fn an_order_whose_stock_was_not_deducted_is_deducted_once() {
    let sale = Sale::open(GRACE_SECS).await;
    let token = sale.sell(1).await;
    sale.sql(&format!(
        "DELETE FROM stock_flow WHERE order_token = '{token}'"
    ))
    .await;
    sale.sql("UPDATE product_stock SET stock = stock + 1").await;
    assert_eq!(sale.mysql_stock().await, STOCK);

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(
        findings(&report),
        [("stock_not_deducted", Outcome::Repaired)]
    );
    assert_eq!(sale.mysql_stock().await, STOCK - 1);

    let again = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(findings(&again), []);
    assert_eq!(sale.mysql_stock().await, STOCK - 1);
}

#[tokio::test]
async fn an_order_with_neither_a_flow_nor_a_stock_flow_is_reported_an_orphan_and_nothing_is_deducted()
 {
    let sale = Sale::open(GRACE_SECS).await;
    // An order Redis never reserved, its stock not deducted in MySQL, which has units left.
    let orphan = domain::OrderToken::random(crate::helpers::PRODUCT);
    sale.write_order(&orphan, 9).await;
    sale.sql(&format!(
        "DELETE FROM stock_flow WHERE order_token = '{orphan}'"
    ))
    .await;
    sale.sql("UPDATE product_stock SET stock = stock + 1").await;
    assert_eq!(sale.mysql_stock().await, STOCK);

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    let mut found = findings(&report);
    found.sort_by_key(|(kind, _)| *kind);
    // stock 10 + ordered 1 - initial 10: the orphan's unit is reported, not taken.
    assert_eq!(
        found,
        [
            ("mysql_drift", Outcome::Unresolved),
            ("orphan_order", Outcome::Unresolved)
        ]
    );
    assert_eq!(sale.mysql_stock().await, STOCK, "nothing was deducted");
    assert_eq!(sale.redis_stock().await, STOCK);
    assert_eq!(report.status, "unresolved");

    let again = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(findings(&again).len(), 2);
    assert_eq!(sale.mysql_stock().await, STOCK);
}

#[tokio::test]
async fn an_orphan_order_and_stock_drift_are_reported_with_their_numbers() {
    let sale = Sale::open(GRACE_SECS).await;
    sale.sell(1).await;
    let orphan = domain::OrderToken::random(crate::helpers::PRODUCT);
    sale.write_order(&orphan, 9).await;
    sale.set_redis_stock(STOCK + 2).await;

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    let mut found = findings(&report);
    found.sort_by_key(|(kind, _)| *kind);
    assert_eq!(
        found,
        [
            ("orphan_order", Outcome::Unresolved),
            ("redis_drift", Outcome::Unresolved)
        ]
    );
    let drift = report
        .discrepancies
        .iter()
        .find(|f| f.kind.as_str() == "redis_drift")
        .unwrap();
    // stock 12 + 1 unit in flows − initial 10 = 3
    assert!(drift.detail.ends_with("= 3"), "{}", drift.detail);
}

#[tokio::test]
async fn a_run_while_another_holds_the_lease_does_nothing() {
    let sale = Sale::open(GRACE_SECS).await;
    sale.reserve(2).await;
    tokio::time::sleep(PAST_GRACE).await;
    let taken = sale
        .stack
        .db
        .db()
        .try_lease("reconcile", "another-replica", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(taken);

    let error = reconcile(sale.settings(), Policy::Republish)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("lease"), "{error:#}");
    assert_eq!(sale.redis_stock().await, STOCK - 1);
}
