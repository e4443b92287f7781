use domain::{OrderPlaced, OrderToken, ProductId};
use order_store::{StoreError, WriteSummary};
use test_support::mysql::TestDb;

use crate::helpers::{RESERVED_AT_MS, count, exec, order, put_product};

#[tokio::test]
async fn write_orders_inserts_the_orders_deducts_stock_and_writes_stock_flow() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    put_product(db, 2, 5).await;
    let batch = vec![order(1, 100, 1), order(1, 101, 2), order(2, 100, 1)];

    let summary = db.write_orders(&batch).await.unwrap();

    assert_eq!(
        summary,
        WriteSummary {
            inserted: 3,
            duplicates: 0,
            stock_left: vec![(ProductId(1), 7), (ProductId(2), 4)],
        }
    );
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(7));
    assert_eq!(db.stock(ProductId(2)).await.unwrap(), Some(4));
    assert_eq!(db.ordered_units(ProductId(1)).await.unwrap(), 3);
    assert_eq!(db.order_count(ProductId(1)).await.unwrap(), 2);
    assert_eq!(
        db.stock_and_order_count(ProductId(1)).await.unwrap(),
        (Some(7), 2)
    );
    assert_eq!(
        db.stock_and_order_count(ProductId(3)).await.unwrap(),
        (None, 0),
        "a product never defined has no stock row and no orders"
    );
    assert_eq!(db.stock_flow_units(ProductId(1)).await.unwrap(), 3);
    assert_eq!(db.stock_flow_units(ProductId(2)).await.unwrap(), 1);

    let row = db.order(&batch[1].order_token).await.unwrap().unwrap();
    assert_eq!(row.order_token, batch[1].order_token);
    assert_eq!(row.user_id.get(), 101);
    assert_eq!(row.product_id, ProductId(1));
    assert_eq!(row.quantity, 2);
    assert_eq!(row.status, domain::OrderStatus::Confirmed);
    assert_eq!(row.reserved_at.timestamp_millis(), RESERVED_AT_MS);
    assert!(
        db.order(&order(1, 1, 1).order_token)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_redelivered_batch_creates_nothing_twice() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    let first = order(1, 100, 1);
    let second = order(1, 101, 2);
    // The broker may also hand us one message twice in the same batch.
    let batch = vec![first.clone(), second.clone(), first.clone()];

    let summary = db.write_orders(&batch).await.unwrap();
    assert_eq!((summary.inserted, summary.duplicates), (2, 1));
    assert_eq!(summary.stock_left, [(ProductId(1), 7)]);

    let redelivered = db.write_orders(&batch).await.unwrap();
    assert_eq!((redelivered.inserted, redelivered.duplicates), (0, 3));
    // Nothing was taken, so nothing was read.
    assert!(redelivered.stock_left.is_empty());

    // A batch mixing old and new orders writes only the new one.
    let third = order(1, 102, 1);
    let mixed = db.write_orders(&[second, third]).await.unwrap();
    assert_eq!((mixed.inserted, mixed.duplicates), (1, 1));
    assert_eq!(mixed.stock_left, [(ProductId(1), 6)]);

    assert_eq!(count(&test_db, "orders").await, 3);
    assert_eq!(count(&test_db, "stock_flow").await, 3);
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_overlapping_batches_write_each_order_once_and_deduct_once() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 1_000).await;
    let mut expected_units = 0;

    for round in 0..5 {
        let orders: Vec<OrderPlaced> = (0..30)
            .map(|user| order(1, user, 1 + user as u32 % 2))
            .collect();
        expected_units += orders.iter().map(|o| i64::from(o.quantity)).sum::<i64>();
        // Two consumers got overlapping batches (a rebalance redelivered part of a queue).
        let left = orders[..20].to_vec();
        let mut right = orders[10..].to_vec();
        right.reverse();

        let stock_before = db.stock(ProductId(1)).await.unwrap().unwrap();
        let (a, b) = tokio::join!(db.write_orders(&left), db.write_orders(&right));
        let (a, b) = (a.unwrap(), b.unwrap());

        assert_eq!(a.inserted + b.inserted, 30, "round {round}: {a:?} {b:?}");
        assert_eq!(a.duplicates + b.duplicates, 10, "round {round}");
        // Each saw the stock its own transaction left: the later of the two the final one,
        // the earlier what was left between them.
        let units =
            |orders: &[OrderPlaced]| -> i64 { orders.iter().map(|o| i64::from(o.quantity)).sum() };
        let stock_after = stock_before - units(&orders);
        let lefts: Vec<i64> = [&a, &b]
            .iter()
            .flat_map(|s| s.stock_left.iter().map(|&(_, left)| left))
            .collect();
        assert!(lefts.contains(&stock_after), "round {round}: {a:?} {b:?}");
        assert!(
            lefts
                .iter()
                .all(|&l| (stock_after..stock_before).contains(&l)),
            "round {round}: {a:?} {b:?}"
        );
    }

    assert_eq!(count(&test_db, "orders").await, 150);
    assert_eq!(count(&test_db, "stock_flow").await, 150);
    assert_eq!(
        db.ordered_units(ProductId(1)).await.unwrap(),
        expected_units
    );
    assert_eq!(
        db.stock(ProductId(1)).await.unwrap(),
        Some(1_000 - expected_units)
    );
}

#[tokio::test]
async fn insufficient_stock_rolls_back_the_whole_batch() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    put_product(db, 2, 2).await;
    let batch = vec![order(1, 100, 1), order(2, 100, 2), order(2, 101, 1)];

    let error = db.write_orders(&batch).await.unwrap_err();

    assert!(
        matches!(
            error,
            StoreError::InsufficientStock {
                product_id: ProductId(2),
                wanted: 3
            }
        ),
        "{error:?}"
    );
    assert!(!error.is_retryable());
    assert!(error.refuses_order());
    assert_eq!(count(&test_db, "orders").await, 0);
    assert_eq!(count(&test_db, "stock_flow").await, 0);
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));
    assert_eq!(db.stock(ProductId(2)).await.unwrap(), Some(2));

    // What fits still goes through on its own.
    let summary = db.write_orders(&batch[..2]).await.unwrap();
    assert_eq!(summary.inserted, 2);
    assert_eq!(db.stock(ProductId(2)).await.unwrap(), Some(0));
}

#[tokio::test]
async fn an_order_for_a_product_never_defined_is_refused() {
    let test_db = TestDb::create().await;

    let error = test_db
        .db()
        .write_orders(&[order(9, 1, 1)])
        .await
        .unwrap_err();

    assert!(
        matches!(error, StoreError::UnknownProduct(ProductId(9))),
        "{error:?}"
    );
    assert!(!error.is_retryable());
    assert_eq!(count(&test_db, "orders").await, 0);
}

#[tokio::test]
async fn a_rejected_message_is_kept_with_its_body_cut_to_size() {
    let test_db = TestDb::create().await;

    test_db
        .db()
        .record_rejected_message("msg-1", "not an OrderPlaced message", &[b'x'; 3000])
        .await
        .unwrap();

    assert_eq!(count(&test_db, "rejected_message").await, 1);
    let mut conn = crate::helpers::raw_conn(&test_db).await;
    use diesel::prelude::*;
    use diesel_async::RunQueryDsl;
    use order_store::schema::rejected_message;
    let (body, len) = rejected_message::table
        .select((rejected_message::body, rejected_message::body_len))
        .first::<(Vec<u8>, u32)>(&mut conn)
        .await
        .unwrap();
    assert_eq!((body.len(), len), (1024, 3000));
}

#[tokio::test]
async fn an_order_whose_stock_flow_row_exists_already_fails_the_batch_retryably() {
    // Not something the services produce; it makes the second of the two INSERTs (the
    // one round trip that carries both) fail after the first one ran.
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    let batch = vec![order(1, 100, 1), order(1, 101, 2)];
    exec(
        &test_db,
        &format!(
            "INSERT INTO stock_flow (order_token, product_id, quantity, op_type) \
             VALUES ('{}', 1, 2, 'SECKILL')",
            batch[1].order_token
        ),
    )
    .await;

    let error = db.write_orders(&batch).await.unwrap_err();

    assert!(matches!(error, StoreError::Conflict { .. }), "{error:?}");
    assert!(error.is_retryable());
    assert_eq!(count(&test_db, "orders").await, 0);
    assert_eq!(count(&test_db, "stock_flow").await, 1);
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));
    // The pool's connections are still fine for the next batch.
    let summary = db.write_orders(&batch[..1]).await.unwrap();
    assert_eq!(summary.stock_left, [(ProductId(1), 9)]);
}

#[tokio::test]
async fn an_order_mysql_refuses_is_recorded_once_and_each_refusal_counted() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 0).await;
    let refused = order(1, 100, 2);
    let error = db
        .write_orders(std::slice::from_ref(&refused))
        .await
        .unwrap_err();
    assert!(error.refuses_order(), "{error:?}");
    assert!(
        db.unwritable_order(&refused.order_token)
            .await
            .unwrap()
            .is_none()
    );

    db.record_unwritable_order(&refused, "msg-1", "stock exhausted in MySQL")
        .await
        .unwrap();
    db.record_unwritable_order(&refused, "msg-2", "stock exhausted in MySQL, again")
        .await
        .unwrap();

    let row = db
        .unwritable_order(&refused.order_token)
        .await
        .unwrap()
        .expect("recorded");
    assert_eq!(row.order_token, refused.order_token.to_string());
    assert_eq!(
        (row.product_id, row.user_id, row.quantity, row.refusals),
        (ProductId(1), refused.user_id, 2, 2)
    );
    assert_eq!(
        (row.msg_id.as_str(), row.reason.as_str()),
        ("msg-2", "stock exhausted in MySQL, again")
    );
    assert_eq!(row.reserved_at.timestamp_millis(), RESERVED_AT_MS);
    assert_eq!(count(&test_db, "unwritable_order").await, 1);
    let by_token = db
        .unwritable_orders_for_tokens(
            ProductId(1),
            &[
                refused.order_token.clone(),
                OrderToken::new(ProductId(1), 1),
            ],
        )
        .await
        .unwrap();
    assert_eq!(by_token.len(), 1);
    assert_eq!(by_token[&refused.order_token], row);
}
