use domain::reconcile::DiscrepancyKind;
use domain::{OrderToken, ProductId};
use order_store::{DiscrepancyRecord, RunStatus, StoreError};
use test_support::mysql::TestDb;

use crate::helpers::{count, exec, order, put_product};

/// An order row without its stock_flow (and with its stock still on the shelf): what a
/// consumer bug or a hand-made fix would leave, and what reconcile must repair.
async fn order_without_stock_flow(test_db: &TestDb, product: u64, quantity: u32) -> OrderToken {
    let message = order(product, 500, quantity);
    test_db
        .db()
        .write_orders(std::slice::from_ref(&message))
        .await
        .unwrap();
    exec(
        test_db,
        &format!(
            "DELETE FROM stock_flow WHERE order_token = '{}'",
            message.order_token
        ),
    )
    .await;
    exec(
        test_db,
        &format!(
            "UPDATE product_stock SET stock = stock + {quantity} WHERE product_id = {product}"
        ),
    )
    .await;
    message.order_token
}

#[tokio::test]
async fn deduct_for_order_is_idempotent() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    let token = order_without_stock_flow(&test_db, 1, 2).await;
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));

    assert!(db.deduct_for_order(&token).await.unwrap());
    assert!(!db.deduct_for_order(&token).await.unwrap());

    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(8));
    assert_eq!(db.stock_flow_units(ProductId(1)).await.unwrap(), 2);
    assert_eq!(count(&test_db, "stock_flow").await, 1);

    // An order the consumer wrote whole has nothing to repair.
    let complete = order(1, 501, 1);
    db.write_orders(std::slice::from_ref(&complete))
        .await
        .unwrap();
    assert!(!db.deduct_for_order(&complete.order_token).await.unwrap());
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(7));

    let unknown = order(1, 502, 1).order_token;
    let error = db.deduct_for_order(&unknown).await.unwrap_err();
    assert!(matches!(error, StoreError::OrderNotFound(_)), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_repairs_of_one_order_deduct_once() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    let token = order_without_stock_flow(&test_db, 1, 1).await;

    let (a, b) = tokio::join!(db.deduct_for_order(&token), db.deduct_for_order(&token));

    assert_eq!(a.unwrap() as u8 + b.unwrap() as u8, 1);
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(9));
}

#[tokio::test]
async fn a_repair_that_finds_no_stock_changes_nothing() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 1).await;
    let token = order_without_stock_flow(&test_db, 1, 1).await;
    exec(&test_db, "UPDATE product_stock SET stock = 0").await;

    let error = db.deduct_for_order(&token).await.unwrap_err();

    assert!(
        matches!(error, StoreError::InsufficientStock { .. }),
        "{error:?}"
    );
    assert_eq!(count(&test_db, "stock_flow").await, 0);
}

#[tokio::test]
async fn orders_for_tokens_and_orders_page_report_has_stock_flow_right() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 100).await;
    put_product(db, 2, 100).await;
    let complete: Vec<_> = (0..3).map(|u| order(1, u, 1)).collect();
    db.write_orders(&complete).await.unwrap();
    let bare = order_without_stock_flow(&test_db, 1, 2).await;
    let other_product = order(2, 9, 1);
    db.write_orders(std::slice::from_ref(&other_product))
        .await
        .unwrap();
    let never_written = order(1, 10, 1).order_token;

    let mut tokens: Vec<OrderToken> = complete.iter().map(|o| o.order_token.clone()).collect();
    tokens.extend([
        bare.clone(),
        other_product.order_token.clone(),
        never_written.clone(),
    ]);
    let facts = db.orders_for_tokens(ProductId(1), &tokens).await.unwrap();

    assert_eq!(facts.len(), 4, "{facts:?}");
    for o in &complete {
        let f = facts[&o.order_token];
        assert!(f.has_stock_flow);
        assert_eq!(f.quantity, 1);
    }
    assert!(!facts[&bare].has_stock_flow);
    assert_eq!(facts[&bare].quantity, 2);
    assert!(!facts.contains_key(&other_product.order_token));
    assert!(!facts.contains_key(&never_written));

    // Walk product 1 two orders at a time.
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = db.orders_page(ProductId(1), after, 2).await.unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 2);
        after = page.last().unwrap().id;
        seen.extend(page);
    }
    assert_eq!(seen.len(), 4);
    assert!(seen.windows(2).all(|w| w[0].id < w[1].id));
    for row in &seen {
        assert_eq!(
            row.has_stock_flow,
            row.order_token != bare.to_string(),
            "{row:?}"
        );
    }
    assert_eq!(db.stock_flow_units(ProductId(1)).await.unwrap(), 3);
}

#[tokio::test]
async fn orders_for_many_tokens_are_read_in_chunks() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 5_000).await;
    let orders: Vec<_> = (0..1_500).map(|u| order(1, u, 1)).collect();
    db.write_orders(&orders).await.unwrap();
    let tokens: Vec<OrderToken> = orders.iter().map(|o| o.order_token.clone()).collect();

    let facts = db.orders_for_tokens(ProductId(1), &tokens).await.unwrap();

    assert_eq!(facts.len(), 1_500);
    assert!(facts.values().all(|f| f.has_stock_flow));
}

#[tokio::test]
async fn a_run_keeps_its_discrepancies_status_and_report() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    assert!(db.latest_run().await.unwrap().is_none());

    let run = db.start_run("republish", Some(ProductId(1))).await.unwrap();
    let token = order(1, 1, 1).order_token.to_string();
    let long_detail = "x".repeat(600);
    db.record_discrepancy(
        run,
        &DiscrepancyRecord {
            product_id: ProductId(1),
            kind: DiscrepancyKind::StockNotDeducted,
            order_token: Some(&token),
            action: "deduct",
            outcome: "done",
            detail: &long_detail,
        },
    )
    .await
    .unwrap();
    db.record_discrepancies(
        run,
        &[DiscrepancyRecord {
            product_id: ProductId(1),
            kind: DiscrepancyKind::MysqlDrift,
            order_token: None,
            action: "report",
            outcome: "reported",
            detail: "gap 1",
        }],
    )
    .await
    .unwrap();
    let running = db.latest_run().await.unwrap().unwrap();
    assert_eq!((running.id, running.status), (run, RunStatus::Running));
    assert!(running.finished_at.is_none());

    db.finish_run(run, RunStatus::Unresolved, r#"{"ok":false}"#)
        .await
        .unwrap();

    let finished = db.latest_run().await.unwrap().unwrap();
    assert_eq!(finished.status, RunStatus::Unresolved);
    assert_eq!(finished.policy, "republish");
    assert_eq!(finished.product_id, Some(ProductId(1)));
    assert_eq!(finished.report.as_deref(), Some(r#"{"ok":false}"#));
    assert!(finished.finished_at.unwrap() >= finished.started_at);
    let found = db.discrepancies(run).await.unwrap();
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].kind, "stock_not_deducted");
    assert_eq!(found[0].order_token.as_deref(), Some(token.as_str()));
    assert_eq!(found[0].detail.len(), 500);
    assert_eq!(found[1].kind, "mysql_drift");

    let next = db.start_run("report", None).await.unwrap();
    assert!(next > run);
    assert_eq!(db.latest_run().await.unwrap().unwrap().id, next);
    assert!(
        db.finish_run(next + 100, RunStatus::Failed, "{}")
            .await
            .is_err()
    );
}
