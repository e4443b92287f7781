use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel_async::RunQueryDsl;
use domain::{Closing, OrderPlaced, OrderStatus, OrderToken, ProductId};
use order_store::{CloseOutcome, Db, LifecycleCounts, Payment, PaymentOutcome, RefundDue};
use test_support::mysql::TestDb;

use crate::helpers::{count, exec, order, put_priced_product, put_product, raw_conn};

const PRICE: u64 = 1_999;

fn minutes(n: i64) -> chrono::Duration {
    chrono::Duration::minutes(n)
}

/// Writes one order of `quantity` units of `product`, to be paid by `pay_by`.
async fn written(db: &Db, product: u64, quantity: u32, pay_by: DateTime<Utc>) -> OrderPlaced {
    let placed = order(product, 7, quantity);
    db.write_orders_due(std::slice::from_ref(&placed), pay_by)
        .await
        .unwrap();
    placed
}

fn payment(id: &str, token: &OrderToken, amount_cents: u64) -> Payment {
    Payment {
        payment_id: id.to_owned(),
        order_token: token.clone(),
        amount_cents,
        paid_at: DateTime::from_timestamp_millis(1_780_000_100_000).unwrap(),
    }
}

/// `stock + units of orders neither cancelled nor expired = initial`, as the store reads it.
async fn assert_stock_equation(db: &Db, product: u64, initial: i64) {
    let id = ProductId(product);
    let stock = db.stock(id).await.unwrap().unwrap();
    let ordered = db.ordered_units(id).await.unwrap();
    assert_eq!(
        stock + ordered,
        initial,
        "stock {stock} + ordered {ordered}"
    );
    assert_eq!(
        db.stock_and_ordered(id).await.unwrap(),
        Some((stock, ordered))
    );
    assert_eq!(db.stock_flow_units(id).await.unwrap(), ordered);
}

async fn releases(test_db: &TestDb) -> i64 {
    use diesel::dsl::sql;
    use diesel::sql_types::BigInt;

    let mut conn = raw_conn(test_db).await;
    diesel::select(sql::<BigInt>(
        "(SELECT COUNT(*) FROM stock_flow WHERE op_type = 'RELEASE')",
    ))
    .get_result(&mut conn)
    .await
    .unwrap()
}

fn row_of(outcome: &CloseOutcome) -> &order_store::OrderRow {
    match outcome {
        CloseOutcome::Closed(row) | CloseOutcome::AlreadyEnded(row) | CloseOutcome::NotDue(row) => {
            row
        }
        CloseOutcome::Unknown => panic!("the order is known"),
    }
}

#[tokio::test]
async fn written_orders_are_confirmed_with_their_deadline() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    let pay_by = DateTime::from_timestamp_millis(1_780_000_900_123).unwrap();

    let placed = written(db, 1, 2, pay_by).await;
    let default_window = order(1, 8, 1);
    let before = Utc::now();
    db.write_orders(std::slice::from_ref(&default_window))
        .await
        .unwrap();

    let row = db.order(&placed.order_token).await.unwrap().unwrap();
    assert_eq!(row.status, OrderStatus::Confirmed);
    assert_eq!(row.pay_by, Some(pay_by));
    assert_eq!((row.closed_at, row.payment_id), (None, None));
    let row = db
        .order(&default_window.order_token)
        .await
        .unwrap()
        .unwrap();
    let window = row.pay_by.unwrap() - before;
    assert!(
        (minutes(14)..=minutes(16)).contains(&window),
        "the default window is 900 s, got {window}"
    );
}

#[tokio::test]
async fn a_cancelled_order_gives_its_units_back_once() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    let kept = written(db, 1, 1, Utc::now() + minutes(10)).await;
    let placed = written(db, 1, 3, Utc::now() + minutes(10)).await;
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(6));

    let first = db
        .close_order(&placed.order_token, Closing::Cancelled)
        .await
        .unwrap();

    let CloseOutcome::Closed(row) = &first else {
        panic!("the first cancel wins: {first:?}");
    };
    assert_eq!(row.status, OrderStatus::Cancelled);
    assert!(row.closed_at.is_some());
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(9));
    assert_eq!(releases(&test_db).await, 1);
    assert_stock_equation(db, 1, 10).await;
    assert_eq!(db.order_count(ProductId(1)).await.unwrap(), 2);
    assert_eq!(
        db.stock_and_order_count(ProductId(1)).await.unwrap(),
        (Some(9), 2),
        "a cancelled order is still an order"
    );

    for why in [Closing::Cancelled, Closing::Expired] {
        let again = db.close_order(&placed.order_token, why).await.unwrap();
        assert_eq!(again, CloseOutcome::AlreadyEnded(row.clone()));
    }
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(9));
    assert_eq!(releases(&test_db).await, 1);
    let kept = db.order(&kept.order_token).await.unwrap().unwrap();
    assert_eq!(kept.status, OrderStatus::Confirmed);
    assert_eq!(
        db.close_order(&order(1, 9, 1).order_token, Closing::Cancelled)
            .await
            .unwrap(),
        CloseOutcome::Unknown
    );
}

#[tokio::test]
async fn expiring_an_order_before_its_deadline_is_not_due_and_changes_nothing() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    let placed = written(db, 1, 2, Utc::now() + minutes(10)).await;

    let outcome = db
        .close_order(&placed.order_token, Closing::Expired)
        .await
        .unwrap();

    let row = db.order(&placed.order_token).await.unwrap().unwrap();
    assert_eq!(outcome, CloseOutcome::NotDue(row.clone()));
    assert_eq!(row.status, OrderStatus::Confirmed);
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(8));
    assert_eq!(releases(&test_db).await, 0);
}

#[tokio::test]
async fn an_order_past_its_deadline_expires_and_gives_its_units_back() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    let placed = written(db, 1, 2, Utc::now() - minutes(1)).await;

    let outcome = db
        .close_order(&placed.order_token, Closing::Expired)
        .await
        .unwrap();

    assert_eq!(row_of(&outcome).status, OrderStatus::Expired);
    assert!(matches!(outcome, CloseOutcome::Closed(_)));
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));
    assert_stock_equation(db, 1, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn of_fifty_racing_payments_cancels_and_expiries_exactly_one_wins() {
    const RACERS: usize = 50;
    // Several pools, as several processes would have: each its own connections.
    const PROCESSES: usize = 10;
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_priced_product(db, 1, 10, PRICE).await;
    let placed = written(db, 1, 2, Utc::now() - minutes(1)).await;
    let token = placed.order_token.clone();
    let pools: Vec<Db> = (0..PROCESSES).map(|_| db.with_own_pool(5)).collect();
    let start = Arc::new(tokio::sync::Barrier::new(RACERS));

    let racers = (0..RACERS).map(|i| {
        let db = pools[i % PROCESSES].clone();
        let token = token.clone();
        let start = Arc::clone(&start);
        tokio::spawn(async move {
            start.wait().await;
            match i % 3 {
                0 => {
                    let paid = db
                        .record_payment(&payment(&format!("pay-{i}"), &token, 2 * PRICE))
                        .await
                        .unwrap();
                    match paid {
                        PaymentOutcome::Paid(row) => (true, row.status),
                        PaymentOutcome::Closed(row) => (false, row.status),
                        other => panic!("{other:?}"),
                    }
                }
                1 => match db.close_order(&token, Closing::Cancelled).await.unwrap() {
                    CloseOutcome::Closed(row) => (true, row.status),
                    CloseOutcome::AlreadyEnded(row) => (false, row.status),
                    other => panic!("{other:?}"),
                },
                _ => match db.close_order(&token, Closing::Expired).await.unwrap() {
                    CloseOutcome::Closed(row) => (true, row.status),
                    CloseOutcome::AlreadyEnded(row) => (false, row.status),
                    other => panic!("{other:?}"),
                },
            }
        })
    });
    let results: Vec<(bool, OrderStatus)> = futures::future::join_all(racers)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();

    let winners: Vec<OrderStatus> = results.iter().filter(|r| r.0).map(|r| r.1).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let won = winners[0];
    assert!(
        results.iter().all(|&(_, status)| status == won),
        "{results:?}"
    );
    let row = db.order(&token).await.unwrap().unwrap();
    assert_eq!(row.status, won);
    let payers = (0..RACERS).filter(|i| i % 3 == 0).count() as i64;
    let counts = db.lifecycle_counts(ProductId(1)).await.unwrap();
    if won == OrderStatus::Paid {
        assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(8));
        assert_eq!(releases(&test_db).await, 0);
        assert_eq!(counts.refunds_due, payers - 1);
    } else {
        assert!(won.returned_units(), "{won}");
        assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));
        assert_eq!(releases(&test_db).await, 1);
        assert_eq!(counts.refunds_due, payers);
    }
    assert_eq!(count(&test_db, "payments").await, payers);
    assert_stock_equation(db, 1, 10).await;
}

#[tokio::test]
async fn a_replayed_payment_answers_what_it_answered_first() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_priced_product(db, 1, 10, PRICE).await;
    let placed = written(db, 1, 1, Utc::now() + minutes(10)).await;
    let first = payment("pay-1", &placed.order_token, PRICE);
    let double = payment("pay-2", &placed.order_token, PRICE);

    let paid = db.record_payment(&first).await.unwrap();
    let refund = db.record_payment(&double).await.unwrap();

    let PaymentOutcome::Paid(row) = &paid else {
        panic!("the first payment pays: {paid:?}");
    };
    assert_eq!(row.status, OrderStatus::Paid);
    assert_eq!(row.payment_id.as_deref(), Some("pay-1"));
    assert_eq!(
        refund,
        PaymentOutcome::Closed(row.clone()),
        "a double charge"
    );
    assert_eq!(db.record_payment(&first).await.unwrap(), paid);
    assert_eq!(db.record_payment(&double).await.unwrap(), refund);
    assert_eq!(count(&test_db, "payments").await, 2);
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(9));
    assert_stock_equation(db, 1, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_payment_delivered_many_times_at_once_is_recorded_once() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_priced_product(db, 1, 10, PRICE).await;
    let placed = written(db, 1, 1, Utc::now() + minutes(10)).await;
    let delivery = payment("pay-1", &placed.order_token, PRICE);
    let pools: Vec<Db> = (0..8).map(|_| db.with_own_pool(1)).collect();

    let answers =
        futures::future::join_all(pools.iter().map(|db| db.record_payment(&delivery))).await;

    for answer in answers {
        let answer = answer.unwrap();
        assert!(
            matches!(&answer, PaymentOutcome::Paid(row) if row.payment_id.as_deref() == Some("pay-1")),
            "{answer:?}"
        );
    }
    assert_eq!(count(&test_db, "payments").await, 1);
    assert_eq!(
        db.lifecycle_counts(ProductId(1)).await.unwrap().refunds_due,
        0
    );
}

#[tokio::test]
async fn a_payment_of_the_wrong_amount_or_for_no_order_changes_nothing() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_priced_product(db, 1, 10, PRICE).await;
    let placed = written(db, 1, 2, Utc::now() + minutes(10)).await;

    let short = db
        .record_payment(&payment("pay-1", &placed.order_token, PRICE))
        .await
        .unwrap();
    let unknown = db
        .record_payment(&payment("pay-2", &order(1, 9, 1).order_token, PRICE))
        .await
        .unwrap();

    assert_eq!(
        short,
        PaymentOutcome::AmountMismatch {
            expected_cents: 2 * PRICE
        }
    );
    assert_eq!(unknown, PaymentOutcome::Unknown);
    assert_eq!(count(&test_db, "payments").await, 0);
    let row = db.order(&placed.order_token).await.unwrap().unwrap();
    assert_eq!((row.status, row.payment_id), (OrderStatus::Confirmed, None));
    // Nothing was recorded, so the right amount under the same id still pays.
    let paid = db
        .record_payment(&payment("pay-1", &placed.order_token, 2 * PRICE))
        .await
        .unwrap();
    assert!(matches!(paid, PaymentOutcome::Paid(_)), "{paid:?}");
}

#[tokio::test]
async fn a_payment_id_that_is_not_short_printable_ascii_is_refused() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_priced_product(db, 1, 10, PRICE).await;
    let placed = written(db, 1, 1, Utc::now() + minutes(10)).await;

    for id in [String::new(), "x".repeat(129), "paiement-é".to_owned()] {
        let refused = db
            .record_payment(&payment(&id, &placed.order_token, PRICE))
            .await
            .unwrap_err();
        assert!(!refused.is_retryable(), "{refused}");
    }
    assert_eq!(count(&test_db, "payments").await, 0);
}

#[tokio::test]
async fn a_payment_for_an_expired_order_is_recorded_as_a_refund_due() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_priced_product(db, 1, 10, PRICE).await;
    let placed = written(db, 1, 2, Utc::now() - minutes(1)).await;
    db.close_order(&placed.order_token, Closing::Expired)
        .await
        .unwrap();
    let late = payment("pay-late", &placed.order_token, 2 * PRICE);

    let outcome = db.record_payment(&late).await.unwrap();

    let PaymentOutcome::Closed(row) = &outcome else {
        panic!("an expired order is not paid: {outcome:?}");
    };
    assert_eq!(
        (row.status, row.payment_id.as_deref()),
        (OrderStatus::Expired, None)
    );
    assert_eq!(
        db.refunds_due(ProductId(1)).await.unwrap(),
        [RefundDue {
            payment_id: late.payment_id.clone(),
            order_token: late.order_token.clone(),
            amount_cents: late.amount_cents,
            paid_at: late.paid_at,
        }]
    );
    assert!(db.refunds_due(ProductId(2)).await.unwrap().is_empty());
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));
    assert_stock_equation(db, 1, 10).await;
}

#[tokio::test]
async fn lifecycle_counts_add_up_paid_returned_and_refunded() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_priced_product(db, 1, 20, PRICE).await;
    assert_eq!(
        db.lifecycle_counts(ProductId(1)).await.unwrap(),
        LifecycleCounts::default()
    );
    let paid = written(db, 1, 2, Utc::now() + minutes(10)).await;
    let cancelled = written(db, 1, 3, Utc::now() + minutes(10)).await;
    let expired = written(db, 1, 1, Utc::now() - minutes(1)).await;
    written(db, 1, 4, Utc::now() + minutes(10)).await;
    db.record_payment(&payment("pay-1", &paid.order_token, 2 * PRICE))
        .await
        .unwrap();
    db.close_order(&cancelled.order_token, Closing::Cancelled)
        .await
        .unwrap();
    db.close_order(&expired.order_token, Closing::Expired)
        .await
        .unwrap();
    db.record_payment(&payment("pay-2", &cancelled.order_token, 3 * PRICE))
        .await
        .unwrap();

    assert_eq!(
        db.lifecycle_counts(ProductId(1)).await.unwrap(),
        LifecycleCounts {
            paid_orders: 1,
            paid_units: 2,
            returned_units: 4,
            refunds_due: 1,
        }
    );
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(14));
    assert_stock_equation(db, 1, 20).await;
}

#[tokio::test]
async fn overdue_orders_are_exactly_the_confirmed_ones_past_their_deadline_by_the_margin() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 100).await;
    put_product(db, 2, 100).await;
    let long_overdue = written(db, 1, 1, Utc::now() - minutes(30)).await;
    let overdue = written(db, 1, 1, Utc::now() - minutes(10)).await;
    let cancelled = written(db, 1, 1, Utc::now() - minutes(10)).await;
    db.close_order(&cancelled.order_token, Closing::Cancelled)
        .await
        .unwrap();
    let just_overdue = written(db, 1, 1, Utc::now() - chrono::Duration::seconds(5)).await;
    written(db, 1, 1, Utc::now() + minutes(10)).await;
    written(db, 2, 1, Utc::now() - minutes(10)).await;
    let margin = Duration::from_secs(60);

    let found = db.overdue_orders(ProductId(1), margin, 100).await.unwrap();
    let first = db.overdue_orders(ProductId(1), margin, 1).await.unwrap();
    let without_margin = db
        .overdue_orders(ProductId(1), Duration::ZERO, 100)
        .await
        .unwrap();

    assert_eq!(
        found,
        [
            long_overdue.order_token.clone(),
            overdue.order_token.clone()
        ]
    );
    assert_eq!(first, std::slice::from_ref(&long_overdue.order_token));
    assert_eq!(
        without_margin,
        [
            long_overdue.order_token,
            overdue.order_token,
            just_overdue.order_token
        ]
    );
}

#[tokio::test]
async fn a_token_keeps_one_take_and_one_release_at_most() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    let placed = written(db, 1, 2, Utc::now() + minutes(10)).await;
    let insert = |op: &str, quantity: i32| {
        format!(
            "INSERT INTO stock_flow (order_token, product_id, quantity, op_type) \
             VALUES ('{}', 1, {quantity}, '{op}')",
            placed.order_token
        )
    };
    let refused = async |sql: String| {
        let mut conn = raw_conn(&test_db).await;
        let result = diesel::sql_query(sql).execute(&mut conn).await;
        assert!(
            matches!(
                result,
                Err(DieselError::DatabaseError(
                    DatabaseErrorKind::UniqueViolation,
                    _
                ))
            ),
            "{result:?}"
        );
    };

    refused(insert("SECKILL", 2)).await;
    refused(insert("RECONCILE_DEDUCT", 2)).await;
    assert!(!db.deduct_for_order(&placed.order_token).await.unwrap());
    db.close_order(&placed.order_token, Closing::Cancelled)
        .await
        .unwrap();
    refused(insert("RELEASE", -2)).await;
    refused(insert("RECONCILE_DEDUCT", 2)).await;
    assert!(!db.deduct_for_order(&placed.order_token).await.unwrap());

    assert_eq!(count(&test_db, "stock_flow").await, 2);
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));
    assert_stock_equation(db, 1, 10).await;
}

#[tokio::test]
async fn a_closed_order_whose_stock_was_never_taken_gives_nothing_back_and_is_not_deducted() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    let placed = written(db, 1, 2, Utc::now() + minutes(10)).await;
    // What the consumer never leaves but reconcile must cope with: an order whose take is
    // missing, its units still on the shelf.
    exec(
        &test_db,
        &format!(
            "DELETE FROM stock_flow WHERE order_token = '{}'",
            placed.order_token
        ),
    )
    .await;
    exec(&test_db, "UPDATE product_stock SET stock = 10").await;

    let closed = db
        .close_order(&placed.order_token, Closing::Cancelled)
        .await
        .unwrap();

    assert!(matches!(closed, CloseOutcome::Closed(_)), "{closed:?}");
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));
    assert!(!db.deduct_for_order(&placed.order_token).await.unwrap());
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));
    assert_eq!(count(&test_db, "stock_flow").await, 0);
    assert_stock_equation(db, 1, 10).await;
}

#[tokio::test]
async fn reconcile_reads_each_order_with_its_status_take_and_release() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_priced_product(db, 1, 10, PRICE).await;
    let open = written(db, 1, 1, Utc::now() + minutes(10)).await;
    let paid = written(db, 1, 1, Utc::now() + minutes(10)).await;
    let cancelled = written(db, 1, 1, Utc::now() + minutes(10)).await;
    db.record_payment(&payment("pay-1", &paid.order_token, PRICE))
        .await
        .unwrap();
    db.close_order(&cancelled.order_token, Closing::Cancelled)
        .await
        .unwrap();
    let tokens = [
        open.order_token.clone(),
        paid.order_token.clone(),
        cancelled.order_token.clone(),
    ];

    let page = db.orders_page(ProductId(1), 0, 10).await.unwrap();
    let facts = db.orders_for_tokens(ProductId(1), &tokens).await.unwrap();

    let seen: Vec<_> = page
        .iter()
        .map(|row| (row.status, row.has_stock_flow, row.has_release))
        .collect();
    assert_eq!(
        seen,
        [
            (OrderStatus::Confirmed, true, false),
            (OrderStatus::Paid, true, false),
            (OrderStatus::Cancelled, true, true),
        ],
        "one row per order, whatever its stock_flow rows"
    );
    let statuses: Vec<_> = tokens
        .iter()
        .map(|t| (facts[t].status, facts[t].has_stock_flow))
        .collect();
    assert_eq!(
        statuses,
        [
            (OrderStatus::Confirmed, true),
            (OrderStatus::Paid, true),
            (OrderStatus::Cancelled, true),
        ]
    );
}

#[tokio::test]
async fn a_price_is_kept_by_a_redefinition_that_names_none() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    put_product(db, 1, 10).await;
    assert_eq!(
        db.product(ProductId(1)).await.unwrap().unwrap().price_cents,
        0
    );

    put_priced_product(db, 1, 10, PRICE).await;
    assert_eq!(
        db.product(ProductId(1)).await.unwrap().unwrap().price_cents,
        PRICE
    );
    put_product(db, 1, 12).await;

    let product = db.product(ProductId(1)).await.unwrap().unwrap();
    assert_eq!((product.price_cents, product.initial_stock), (PRICE, 12));
}
