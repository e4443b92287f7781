//! The write path without the broker: batches handed straight to the [`OrderWriter`], as the
//! subscriber's listener would.

use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::ProductId;
use order_consumer_svc::backlog::OrdersPerMessage;
use order_consumer_svc::writer::OrderWriter;
use order_queue::{BatchVerdict, Delivery};
use order_store::Db;
use stock_cache::StockCache;

use crate::helpers::{
    ORDERS_PER_TRANSACTION, TestWriter, deliveries, delivery, handle, malformed, message, order,
    orders, writer_on,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_valid_orders_is_written_deducted_and_marked_confirmed() {
    let t = TestWriter::new().await;
    t.put_product(1, 10).await;
    let batch = orders(1, 4);

    assert_eq!(t.handle(&deliveries(&batch)).await, BatchVerdict::Done);

    assert_eq!(t.order_count(1).await, 4);
    assert_eq!(t.stock_flow_rows(1).await, 4);
    assert_eq!(t.mysql_stock(1).await, 6);
    for order in &batch {
        let row = t.db().order(&order.order_token).await.unwrap().unwrap();
        assert_eq!(row.user_id, order.user_id);
        assert_eq!(row.quantity, 1);
        assert_eq!(row.status, domain::OrderStatus::Confirmed);
    }
    t.assert_confirmed(&batch).await;
    assert!(t.rejected().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_order_of_a_message_carrying_several_is_written_once_even_when_redelivered() {
    let t = TestWriter::new().await;
    t.put_product(1, 10).await;
    let several = orders(1, 5);
    let message = message(&several);
    let alone = orders(1, 1);
    let batch = [message.clone(), delivery(&alone[0])];

    assert_eq!(t.handle(&batch).await, BatchVerdict::Done);
    assert_eq!(t.handle(&[message]).await, BatchVerdict::Done);

    assert_eq!(t.order_count(1).await, 6);
    assert_eq!(t.stock_flow_rows(1).await, 6);
    assert_eq!(t.mysql_stock(1).await, 4);
    t.assert_confirmed(several.iter().chain(&alone)).await;
    assert!(t.rejected().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orders_its_messages_carried_set_what_a_message_of_the_backlog_counts_for() {
    let t = TestWriter::new().await;
    t.put_product(1, 100).await;
    let per_message = Arc::new(OrdersPerMessage::default());
    let writer = Arc::new(
        OrderWriter::new(
            t.db().clone(),
            t.cache().clone(),
            ORDERS_PER_TRANSACTION,
            tokio::runtime::Handle::current(),
            16,
        )
        .counting_orders_per_message(per_message.clone()),
    );
    assert_eq!(per_message.orders_in(10), 10.0);

    // Crowd-sized messages: 8 orders in each.
    for _ in 0..5 {
        let batch = [message(&orders(1, 8)), message(&orders(1, 8))];
        assert_eq!(handle(&writer, &batch).await, BatchVerdict::Done);
    }

    let ten_messages = per_message.orders_in(10);
    assert!(
        (50.0..=80.0).contains(&ten_messages),
        "10 messages of the backlog count as {ten_messages} orders"
    );
    assert_eq!(t.order_count(1).await, 80);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_more_orders_than_one_transaction_takes_is_written_whole() {
    let t = TestWriter::new().await;
    t.put_product(1, 30).await;
    let all = orders(1, 21);
    assert!(all.len() > ORDERS_PER_TRANSACTION);
    let batch: Vec<Delivery> = all.chunks(7).map(message).collect();

    assert_eq!(t.handle(&batch).await, BatchVerdict::Done);

    assert_eq!(t.order_count(1).await, 21);
    assert_eq!(t.stock_flow_rows(1).await, 21);
    assert_eq!(t.mysql_stock(1).await, 9);
    t.assert_confirmed(&all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_beyond_mysql_stock_is_set_aside_while_the_rest_of_its_batch_across_products_is_written()
 {
    let t = TestWriter::new().await;
    t.put_product(1, 20).await;
    t.put_product(2, 1).await;
    // One transaction's worth of product 1, then a transaction that mixes both products,
    // where product 2 has one unit in MySQL for its two orders.
    let first = orders(1, ORDERS_PER_TRANSACTION as u64);
    let (p2_first, p2_second) = (order(2, 1), order(2, 2));
    let mixed = [
        order(1, 101),
        p2_first.clone(),
        order(1, 102),
        p2_second.clone(),
        order(1, 103),
    ];
    let mut batch = vec![message(&first)];
    batch.extend(deliveries(&mixed));

    assert_eq!(t.handle(&batch).await, BatchVerdict::Done);

    let product_1: Vec<_> = first
        .iter()
        .chain([&mixed[0], &mixed[2], &mixed[4]])
        .collect();
    assert_eq!(t.order_count(1).await, product_1.len() as i64);
    assert_eq!(t.mysql_stock(1).await, 20 - product_1.len() as i64);
    assert_eq!((t.order_count(2).await, t.mysql_stock(2).await), (1, 0));
    assert!(t.db().order(&p2_first.order_token).await.unwrap().is_some());
    t.assert_confirmed(product_1.iter().copied().chain([&p2_first]))
        .await;

    // The order MySQL cannot take: not written, not confirmed, recorded with why.
    assert!(
        t.db()
            .order(&p2_second.order_token)
            .await
            .unwrap()
            .is_none()
    );
    assert!(!t.confirmed(&p2_second.order_token).await);
    let set_aside = t.unwritable(&p2_second).await.expect("it is recorded");
    assert!(
        set_aside.reason.contains("stock exhausted in MySQL"),
        "{}",
        set_aside.reason
    );
    assert_eq!(
        (
            set_aside.product_id,
            set_aside.user_id,
            set_aside.quantity,
            set_aside.refusals
        ),
        (ProductId(2), p2_second.user_id, 1, 1)
    );
    assert_eq!(set_aside.msg_id, batch[4].msg_id);
    assert!(t.rejected().await.is_empty());

    // Redelivered, nothing is written twice and the refusal is counted again.
    assert_eq!(t.handle(&batch).await, BatchVerdict::Done);
    assert_eq!(t.order_count(1).await, product_1.len() as i64);
    assert_eq!((t.order_count(2).await, t.mysql_stock(2).await), (1, 0));
    assert_eq!(t.unwritable(&p2_second).await.unwrap().refusals, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivering_the_same_batch_again_creates_nothing_twice() {
    let t = TestWriter::new().await;
    t.put_product(1, 10).await;
    let batch = deliveries(&orders(1, 3));
    assert_eq!(t.handle(&batch).await, BatchVerdict::Done);

    let redelivered: Vec<_> = batch
        .iter()
        .cloned()
        .map(|mut d| {
            d.reconsume_times = 1;
            d
        })
        .collect();
    assert_eq!(t.handle(&redelivered).await, BatchVerdict::Done);
    assert_eq!(t.handle(&batch).await, BatchVerdict::Done);

    assert_eq!(t.order_count(1).await, 3);
    assert_eq!(t.stock_flow_rows(1).await, 3);
    assert_eq!(t.mysql_stock(1).await, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_repeated_within_one_batch_is_written_once() {
    let t = TestWriter::new().await;
    t.put_product(1, 10).await;
    let once = order(1, 7);
    let other = order(1, 8);
    let batch = deliveries(&[once.clone(), other, once]);

    assert_eq!(t.handle(&batch).await, BatchVerdict::Done);

    assert_eq!(t.order_count(1).await, 2);
    assert_eq!(t.stock_flow_rows(1).await, 2);
    assert_eq!(t.mysql_stock(1).await, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_spanning_two_products_deducts_each_its_own_units() {
    let t = TestWriter::new().await;
    t.put_product(1, 10).await;
    t.put_product(2, 5).await;
    let mut batch = orders(1, 3);
    batch.extend(orders(2, 2));

    assert_eq!(t.handle(&deliveries(&batch)).await, BatchVerdict::Done);

    assert_eq!((t.order_count(1).await, t.mysql_stock(1).await), (3, 7));
    assert_eq!((t.order_count(2).await, t.mysql_stock(2).await), (2, 3));
    assert_eq!(t.stock_flow_rows(1).await + t.stock_flow_rows(2).await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_body_is_recorded_as_rejected_while_the_valid_orders_of_its_batch_are_written()
{
    let t = TestWriter::new().await;
    t.put_product(1, 10).await;
    let valid = orders(1, 2);
    let mut batch = deliveries(&valid);
    batch.insert(1, malformed("bad-1", b"{\"not\": \"an order\"}"));

    assert_eq!(t.handle(&batch).await, BatchVerdict::Done);

    assert_eq!(t.order_count(1).await, 2);
    assert_eq!(t.stock_flow_rows(1).await, 2);
    assert_eq!(t.mysql_stock(1).await, 8);
    t.assert_confirmed(&valid).await;
    let rejected = t.rejected().await;
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0].msg_id, "bad-1");
    assert_eq!(rejected[0].body, b"{\"not\": \"an order\"}");
    assert_eq!(rejected[0].body_len, 19);
    assert!(
        rejected[0].reason.contains("not an OrderPlaced"),
        "{}",
        rejected[0].reason
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_that_can_never_be_valid_are_rejected_not_retried() {
    let t = TestWriter::new().await;
    t.put_product(1, 10).await;
    let mut other_version = order(1, 1);
    other_version.v = 2;
    let mut zero = order(1, 2);
    zero.quantity = 0;
    let mut wrong_product = order(1, 3);
    wrong_product.product_id = ProductId(2);
    let oversized = vec![b' '; 2000];
    let batch = vec![
        malformed("v2", &other_version.encode()),
        malformed("zero", &zero.encode()),
        malformed("wrong-product", &wrong_product.encode()),
        malformed("huge", &oversized),
        malformed("empty", b""),
    ];

    assert_eq!(t.handle(&batch).await, BatchVerdict::Done);

    assert_eq!(t.order_count(1).await, 0);
    assert_eq!(t.mysql_stock(1).await, 10);
    let rejected = t.rejected().await;
    let ids: Vec<&str> = rejected.iter().map(|r| r.msg_id.as_str()).collect();
    assert_eq!(ids, ["v2", "zero", "wrong-product", "huge", "empty"]);
    // The whole length is kept, the body only up to its column's width.
    assert_eq!((rejected[3].body_len, rejected[3].body.len()), (2000, 1024));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_beyond_mysql_stock_are_set_aside_and_the_batch_is_acknowledged_not_retried() {
    let t = TestWriter::new().await;
    t.put_product(1, 2).await;
    let batch = orders(1, 3);

    assert_eq!(t.handle(&deliveries(&batch)).await, BatchVerdict::Done);

    assert_eq!(t.order_count(1).await, 2);
    assert_eq!(t.stock_flow_rows(1).await, 2);
    assert_eq!(t.mysql_stock(1).await, 0);
    t.assert_confirmed(&batch[..2]).await;
    assert!(!t.confirmed(&batch[2].order_token).await);
    assert!(t.unwritable(&batch[0]).await.is_none());
    assert!(t.unwritable(&batch[2]).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_for_a_product_mysql_does_not_know_is_set_aside_not_retried() {
    let t = TestWriter::new().await;
    let unknown = order(9, 1);
    assert_eq!(t.handle(&[delivery(&unknown)]).await, BatchVerdict::Done);
    assert_eq!(t.order_count(9).await, 0);
    let set_aside = t.unwritable(&unknown).await.expect("it is recorded");
    assert!(
        set_aside.reason.contains("no stock row"),
        "{}",
        set_aside.reason
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_while_mysql_is_unreachable_is_handed_back_quickly() {
    let t = TestWriter::new().await;
    // Nothing listens on port 1: every connection attempt is refused.
    let down = Db::connect("mysql://seckill:seckill@127.0.0.1:1/seckill", 2).unwrap();
    let writer = writer_on(down, t.cache().clone());
    let batch = deliveries(&orders(1, 3));

    let started = Instant::now();
    assert_eq!(handle(&writer, &batch).await, BatchVerdict::RetryLater);
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
    for delivery in &batch {
        let order = domain::OrderPlaced::decode(&delivery.body).unwrap();
        assert!(!t.confirmed(&order.order_token).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_body_while_mysql_is_unreachable_hands_the_batch_back() {
    let t = TestWriter::new().await;
    let down = Db::connect("mysql://seckill:seckill@127.0.0.1:1/seckill", 2).unwrap();
    let writer = writer_on(down, t.cache().clone());
    let batch = vec![malformed("bad", b"garbage"), delivery(&order(1, 1))];

    let started = Instant::now();
    assert_eq!(handle(&writer, &batch).await, BatchVerdict::RetryLater);
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_written_while_redis_is_unreachable_are_still_acknowledged() {
    let t = TestWriter::new().await;
    t.put_product(1, 10).await;
    let down = StockCache::new(
        "redis://127.0.0.1:1",
        2,
        "unreachable",
        Duration::from_secs(2),
    )
    .unwrap();
    let writer = writer_on(t.db().clone(), down);
    let batch = orders(1, 2);

    let started = Instant::now();
    assert_eq!(
        handle(&writer, &deliveries(&batch)).await,
        BatchVerdict::Done
    );
    assert!(started.elapsed() < Duration::from_secs(15));

    // MySQL holds them; status polling falls back to it.
    assert_eq!(t.order_count(1).await, 2);
    assert_eq!(t.mysql_stock(1).await, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_the_store_cannot_hold_is_rejected_without_holding_back_its_batch() {
    let t = TestWriter::new().await;
    t.put_product(1, 10).await;
    // Both decode, but the store cannot hold them: stock_flow.quantity is a signed INT, and
    // a DATETIME ends with the year 9999.
    let mut huge = order(1, 1);
    huge.quantity = 3_000_000_000;
    let mut far = order(1, 2);
    far.reserved_at_ms = i64::MAX;
    let valid = orders(1, 3);
    let mut batch = deliveries(&valid);
    batch.insert(1, delivery(&huge));
    batch.push(delivery(&far));

    assert_eq!(t.handle(&batch).await, BatchVerdict::Done);

    assert_eq!(t.order_count(1).await, 3);
    assert_eq!(t.stock_flow_rows(1).await, 3);
    assert_eq!(t.mysql_stock(1).await, 7);
    t.assert_confirmed(&valid).await;
    assert!(!t.confirmed(&huge.order_token).await);
    let rejected = t.rejected().await;
    let ids: Vec<&str> = rejected.iter().map(|r| r.msg_id.as_str()).collect();
    assert_eq!(ids, [batch[1].msg_id.as_str(), batch[4].msg_id.as_str()]);

    // Redelivered, the batch neither writes nor deducts anything again.
    assert_eq!(t.handle(&batch).await, BatchVerdict::Done);
    assert_eq!(t.order_count(1).await, 3);
    assert_eq!(t.mysql_stock(1).await, 7);
}
