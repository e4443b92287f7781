//! Redis sold more units than MySQL holds (a failover to a lagging replica, a crash that
//! lost decrements, a miscounted restock): the last orders can never be written. Reconcile
//! must report them unresolved, never re-publish one and call it repaired.

use std::sync::Arc;
use std::time::Duration;

use domain::{FlowState, OrderPlaced, OrderToken, UserId};
use order_consumer_svc::writer::OrderWriter;
use order_queue::{BatchHandler, BatchVerdict, Delivery};
use reconcile_svc::Policy;
use reconcile_svc::report::{Outcome, Report};

use crate::helpers::{PRODUCT, STOCK, Sale, reconcile};

const PAST_GRACE: Duration = Duration::from_millis(1_200);

/// MySQL's side of the sale shrunk to `units`, consistently (stock + ordered = initial),
/// while Redis keeps what it sold: the over-sell a miscounted restock leaves.
async fn mysql_holds_only(sale: &Sale, units: i64) {
    sale.sql(&format!(
        "UPDATE products SET initial_stock = {units} WHERE id = {PRODUCT}"
    ))
    .await;
    sale.sql(&format!(
        "UPDATE product_stock SET stock = {units} WHERE product_id = {PRODUCT}"
    ))
    .await;
}

fn finding_of<'a>(report: &'a Report, token: &OrderToken) -> &'a reconcile_svc::report::Finding {
    report
        .discrepancies
        .iter()
        .find(|f| f.order_token.as_deref() == Some(token.to_string().as_str()))
        .unwrap_or_else(|| panic!("no finding for {token}: {report:?}"))
}

async fn flow_state(sale: &Sale, token: &OrderToken) -> Option<FlowState> {
    let view = sale.stack.redis.cache().order_view(token).await.unwrap();
    view.flow.map(|flow| flow.state)
}

#[tokio::test]
async fn a_missing_order_beyond_mysql_stock_is_reported_unresolved_while_the_one_that_fits_is_republished()
 {
    let sale = Sale::open("1").await;
    let first = sale.reserve(1).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = sale.reserve(2).await;
    // Redis sold two units; MySQL has one.
    mysql_holds_only(&sale, 1).await;
    tokio::time::sleep(PAST_GRACE).await;

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();

    assert_eq!(report.discrepancy_count, 2, "{report:?}");
    assert_eq!(finding_of(&report, &first).outcome, Outcome::Repaired);
    let refused = finding_of(&report, &second);
    assert_eq!(refused.outcome, Outcome::Unresolved);
    assert!(
        refused.detail.starts_with("over-sold"),
        "{}",
        refused.detail
    );
    assert_eq!(report.status, "unresolved");
    // The one beyond MySQL's stock was neither confirmed nor sent.
    assert_eq!(flow_state(&sale, &second).await, Some(FlowState::Reserved));
    assert_eq!(flow_state(&sale, &first).await, Some(FlowState::Committed));

    sale.consume_until_ordered(&first).await;
    assert_eq!(sale.mysql_stock().await, 0);
    let again = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(again.discrepancy_count, 1);
    assert_eq!(finding_of(&again, &second).outcome, Outcome::Unresolved);
    assert!(sale.stack.db.db().order(&second).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_the_consumer_refused_is_reported_unresolved_with_its_reason_until_mysql_is_restocked()
 {
    let sale = Sale::open("1").await;
    let token = sale.reserve(2).await;
    assert!(sale.stack.redis.cache().confirm(&token).await.unwrap());
    mysql_holds_only(&sale, 0).await;
    // The gateway's message reaches the consumer, which MySQL refuses.
    let order = OrderPlaced::new(token.clone(), UserId(2), 1, 0);
    assert_eq!(consume(&sale, &order).await, BatchVerdict::Done);
    assert!(
        sale.stack
            .db
            .db()
            .unwritable_order(&token)
            .await
            .unwrap()
            .is_some()
    );
    tokio::time::sleep(PAST_GRACE).await;

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    let refused = finding_of(&report, &token);
    assert_eq!(
        (refused.kind.as_str(), refused.outcome),
        ("missing_order", Outcome::Unresolved)
    );
    assert!(
        refused
            .detail
            .contains("the consumer refused it 1 time(s): stock exhausted in MySQL"),
        "{}",
        refused.detail
    );
    assert_eq!(report.unresolved(), 1);

    // A person restocks MySQL by the unit it lacks: the order is re-published and written.
    mysql_holds_only(&sale, 1).await;
    let repaired = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(finding_of(&repaired, &token).outcome, Outcome::Repaired);
    sale.consume_until_ordered(&token).await;
    assert_eq!(sale.mysql_stock().await, 0);
    let settled = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(settled.status, "clean", "{settled:?}");
    assert_eq!(sale.redis_stock().await, STOCK - 1);
}

/// Hands `order` to the consumer's writer, as its subscriber would.
async fn consume(sale: &Sale, order: &OrderPlaced) -> BatchVerdict {
    let writer = Arc::new(OrderWriter::new(
        sale.stack.db.db().clone(),
        sale.stack.redis.cache().clone(),
        8,
        tokio::runtime::Handle::current(),
        16,
    ));
    let delivery = Delivery {
        msg_id: format!("msg-{}", order.order_token),
        key: Some(order.order_token.to_string()),
        body: order.encode(),
        reconsume_times: 0,
        traceparent: None,
    };
    tokio::task::spawn_blocking(move || writer.handle(&[delivery]))
        .await
        .unwrap()
}
