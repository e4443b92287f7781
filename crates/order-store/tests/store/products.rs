use chrono::{DateTime, Utc};
use domain::ProductId;
use order_store::{PutError, PutOutcome, StoreError};
use test_support::mysql::TestDb;

use crate::helpers::{new_product, order, put_product};

#[tokio::test]
async fn a_product_is_stored_with_its_sale_window() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    let starts_at = DateTime::<Utc>::from_timestamp_millis(1_780_000_000_123).unwrap();
    let ends_at = DateTime::<Utc>::from_timestamp_millis(1_780_003_600_000).unwrap();
    let product = order_store::NewProduct {
        starts_at: Some(starts_at),
        ends_at: Some(ends_at),
        name: "秒杀 phone".into(),
        ..new_product(7, 100)
    };

    assert_eq!(
        db.put_product(&product, false).await.unwrap(),
        PutOutcome::Created
    );

    let row = db.product(ProductId(7)).await.unwrap().unwrap();
    assert_eq!(row.name, "秒杀 phone");
    assert_eq!(row.initial_stock, 100);
    assert_eq!(row.per_user_limit, 2);
    assert_eq!(row.starts_at, Some(starts_at));
    assert_eq!(row.ends_at, Some(ends_at));
    assert_eq!(db.stock(ProductId(7)).await.unwrap(), Some(100));
    assert!(db.product(ProductId(8)).await.unwrap().is_none());
    assert_eq!(db.stock(ProductId(8)).await.unwrap(), None);
}

#[tokio::test]
async fn put_product_refuses_while_orders_exist_unless_forced() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    let id = ProductId(1);
    assert_eq!(
        db.put_product(&new_product(1, 10), false).await.unwrap(),
        PutOutcome::Created
    );
    // Without orders a product can be redefined freely.
    assert_eq!(
        db.put_product(&new_product(1, 20), false).await.unwrap(),
        PutOutcome::Replaced { delta: 10 }
    );
    assert_eq!(db.stock(id).await.unwrap(), Some(20));

    db.write_orders(&[order(1, 100, 2), order(1, 101, 1)])
        .await
        .unwrap();

    let error = db
        .put_product(&new_product(1, 50), false)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::OrdersExist {
                product_id: ProductId(1),
                orders: 2
            }
        ),
        "{error:?}"
    );
    assert!(!error.is_retryable());
    assert_eq!(db.stock(id).await.unwrap(), Some(17));
    assert_eq!(db.product(id).await.unwrap().unwrap().initial_stock, 20);

    // Forced, `initial_stock` is the new total, and the stock moves by the same delta.
    let outcome = db.put_product(&new_product(1, 50), true).await.unwrap();
    assert_eq!(
        outcome,
        PutOutcome::Restocked {
            delta: 30,
            stock: 47
        }
    );
    let row = db.product(id).await.unwrap().unwrap();
    assert_eq!(row.initial_stock, 50);
    // What reconcile checks: stock + ordered = initial.
    assert_eq!(
        db.stock(id).await.unwrap().unwrap() + db.ordered_units(id).await.unwrap(),
        50
    );
}

#[tokio::test]
async fn a_forced_put_below_the_units_ordered_is_refused_and_changes_nothing() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    let id = ProductId(1);
    put_product(db, 1, 10).await;
    db.write_orders(&[order(1, 100, 2), order(1, 101, 2)])
        .await
        .unwrap();

    let error = db.put_product(&new_product(1, 3), true).await.unwrap_err();

    assert!(
        matches!(
            error,
            StoreError::StockBelowSold {
                product_id: ProductId(1),
                sold: 4,
                wanted: 3
            }
        ),
        "{error:?}"
    );
    assert!(!error.is_retryable());
    assert_eq!(db.stock(id).await.unwrap(), Some(6));
    assert_eq!(db.product(id).await.unwrap().unwrap().initial_stock, 10);
    assert_eq!(
        db.put_product(&new_product(1, 4), true).await.unwrap(),
        PutOutcome::Restocked {
            delta: -6,
            stock: 0
        },
        "as many units as were ordered: nothing left on sale"
    );
}

#[tokio::test]
async fn a_failed_load_rolls_the_put_back() {
    let test_db = TestDb::create().await;
    let db = test_db.db();
    let id = ProductId(1);
    put_product(db, 1, 10).await;
    db.write_orders(&[order(1, 100, 2)]).await.unwrap();

    let refused = db
        .put_product_and(&new_product(1, 30), true, async |outcome| {
            assert_eq!(
                outcome,
                PutOutcome::Restocked {
                    delta: 20,
                    stock: 28
                }
            );
            // The rows are written, not committed: another connection does not see them.
            let seen = test_db.db().stock(id).await.unwrap();
            Err::<(), _>(seen)
        })
        .await;

    match refused {
        Err(PutError::Load(seen)) => assert_eq!(seen, Some(8)),
        other => panic!("{other:?}"),
    }
    assert_eq!(db.stock(id).await.unwrap(), Some(8));
    assert_eq!(db.product(id).await.unwrap().unwrap().initial_stock, 10);
}

#[tokio::test]
async fn a_negative_stock_is_refused() {
    let test_db = TestDb::create().await;

    let error = test_db
        .db()
        .put_product(&new_product(1, -1), false)
        .await
        .unwrap_err();

    assert!(matches!(error, StoreError::InvalidData(_)), "{error:?}");
}
