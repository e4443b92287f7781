//! One run at a time, however long a run takes: the lease is renewed while the run lasts,
//! and a run that loses it all the same stops.
//!
//! A run is made to last by a row lock the test holds on the product's stock: the run's
//! repair of an order whose stock was not deducted waits on it, as a run waits on a busy
//! MySQL, until the test lets go.

use std::time::Duration;

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl, SimpleAsyncConnection};
use order_store::schema::lease;
use reconcile_svc::Policy;
use reconcile_svc::report::Outcome;

use crate::helpers::{PRODUCT, STOCK, Sale, findings, reconcile};

/// The lease's TTL in these tests: a run that waits on the lock outlasts it three times.
const LEASE_SECS: &str = "2";
const OUTLAST_THE_LEASE: Duration = Duration::from_secs(6);

/// An order whose stock_flow is gone and whose unit is back in MySQL's stock: the run
/// deducts it, which takes the stock row's lock.
async fn an_order_to_deduct(sale: &Sale) {
    let token = sale.sell(1).await;
    sale.sql(&format!(
        "DELETE FROM stock_flow WHERE order_token = '{token}'"
    ))
    .await;
    sale.sql("UPDATE product_stock SET stock = stock + 1").await;
}

/// Holds the lock of the product's stock row until the connection rolls back.
async fn lock_the_stock_row(sale: &Sale) -> AsyncMysqlConnection {
    let mut conn = AsyncMysqlConnection::establish(sale.stack.db.url())
        .await
        .unwrap();
    conn.batch_execute(&format!(
        "START TRANSACTION; SELECT stock FROM product_stock WHERE product_id = {PRODUCT} FOR UPDATE"
    ))
    .await
    .unwrap();
    conn
}

/// Waits until a run holds the reconcile lease (its application is built first).
async fn wait_until_leased(sale: &Sale) {
    let mut conn = AsyncMysqlConnection::establish(sale.stack.db.url())
        .await
        .unwrap();
    for _ in 0..300 {
        let holder = lease::table
            .find("reconcile")
            .select(lease::holder)
            .first::<String>(&mut conn)
            .await
            .optional()
            .unwrap();
        if holder.is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no run took the lease");
}

#[tokio::test]
async fn a_run_longer_than_its_lease_ttl_keeps_the_lease_and_a_second_runner_is_refused() {
    let sale = Sale::open("600").await;
    an_order_to_deduct(&sale).await;
    let settings = sale.settings_with(&[("SECKILL_RECONCILE__LEASE_SECS", LEASE_SECS)]);
    let mut lock = lock_the_stock_row(&sale).await;

    let first = tokio::spawn(reconcile(settings.clone(), Policy::Republish));
    wait_until_leased(&sale).await;
    tokio::time::sleep(OUTLAST_THE_LEASE).await;
    assert!(!first.is_finished(), "the run waits on the stock row");
    // The second runner is refused at once; without renewals it would have found the lease
    // expired and run beside the first (and waited on the same lock).
    let second = tokio::time::timeout(
        Duration::from_secs(20),
        reconcile(settings.clone(), Policy::Republish),
    )
    .await
    .expect("the second runner does not wait on the first's lock: it never runs");
    let refusal = second.expect_err("the first run still holds the lease");
    assert!(refusal.to_string().contains("lease"), "{refusal:#}");

    lock.batch_execute("ROLLBACK").await.unwrap();
    let report = first.await.unwrap().unwrap();
    assert_eq!(
        findings(&report),
        [("stock_not_deducted", Outcome::Repaired)]
    );
    assert_eq!(sale.mysql_stock().await, STOCK - 1);
}

#[tokio::test]
async fn a_run_that_loses_its_lease_stops_at_its_next_step_and_is_recorded_failed() {
    let sale = Sale::open("600").await;
    an_order_to_deduct(&sale).await;
    let settings = sale.settings_with(&[("SECKILL_RECONCILE__LEASE_SECS", LEASE_SECS)]);
    let mut lock = lock_the_stock_row(&sale).await;

    let run = tokio::spawn(reconcile(settings, Policy::Republish));
    // The run's record is written once the lease is taken and checked: taken over any
    // sooner, the run would never have started.
    wait_until_leased(&sale).await;
    while sale.stack.db.db().latest_run().await.unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Another holder takes the row over (an operator, or a runner after a long MySQL
    // outage): the run's next renewal finds it gone.
    sale.sql(
        "UPDATE lease SET holder = 'another-runner', expires_at = NOW(3) + INTERVAL 1 MINUTE \
         WHERE name = 'reconcile'",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    lock.batch_execute("ROLLBACK").await.unwrap();

    let error = run.await.unwrap().expect_err("the run stopped");
    assert!(
        error.to_string().contains("lost the reconcile lease"),
        "{error:#}"
    );
    let recorded = sale.stack.db.db().latest_run().await.unwrap().unwrap();
    assert_eq!(recorded.status.as_str(), "failed");
    // It stopped before its totals, and left the other holder's lease alone.
    let taken = sale
        .stack
        .db
        .db()
        .try_lease("reconcile", "someone-else", Duration::from_secs(1))
        .await
        .unwrap();
    assert!(!taken, "the other runner's lease is still there");
}
