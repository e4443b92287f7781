//! An order whose message exhausted its retries sits in the DLQ, out of the consumer's
//! reach; reconcile sees its flow without an order and sends it again.

use std::time::Duration;

use reconcile_svc::Policy;
use reconcile_svc::report::Outcome;

use crate::helpers::{STOCK, Sale, findings, reconcile};

#[tokio::test]
async fn an_order_dead_lettered_after_its_retries_is_found_and_republished() {
    let sale = Sale::open("1").await;
    let token = sale.reserve(2).await;
    assert!(sale.stack.redis.cache().confirm(&token).await.unwrap());
    // MySQL refuses every order row until a person fixes it, a failure of the statement, not
    // of the order (an order MySQL's stock cannot take is set aside instead, not retried):
    // the batch goes back to the broker each time.
    sale.batch_sql(
        "CREATE TRIGGER refuse_orders BEFORE INSERT ON orders FOR EACH ROW \
         SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'orders are refused for this test'",
    )
    .await;
    let consumer = sale
        .start_consumer(&[("SECKILL_CONSUMER__MAX_RECONSUME_TIMES", "1")])
        .await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    // The first send: delivered, refused, retried once after the broker's 10 s, refused
    // again, dead-lettered.
    let first = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(findings(&first), [("missing_order", Outcome::Repaired)]);
    tokio::time::sleep(Duration::from_secs(15)).await;
    sale.batch_sql("DROP TRIGGER refuse_orders").await;
    // The next retry would have come 30 s after the last; none comes: it is in the DLQ.
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert!(sale.stack.db.db().order(&token).await.unwrap().is_none());
    // The consumer counted the message it handed back for the last time.
    let metrics = reqwest::get(format!("{}/metrics", consumer.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let dead_lettered = metrics
        .lines()
        .find(|line| line.starts_with("seckill_consumer_dead_lettered_total "))
        .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok());
    assert!(dead_lettered >= Some(1.0), "{metrics}");

    let second = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    assert_eq!(findings(&second), [("missing_order", Outcome::Repaired)]);
    sale.wait_ordered(&token, Duration::from_secs(30)).await;
    assert_eq!(sale.mysql_stock().await, STOCK - 1);
}
