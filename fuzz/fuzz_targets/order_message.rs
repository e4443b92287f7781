//! The order message body, decoded by the consumer (`order-consumer-svc`'s writer) and by
//! the producer's local-transaction listener with `OrderPlaced::decode_all` (one order or an
//! array of several): bytes straight from the broker.

#![no_main]

use domain::OrderPlaced;
use domain::message::ORDER_PLACED_VERSION;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    if let Ok(orders) = OrderPlaced::decode_all(body) {
        assert!(!orders.is_empty());
        for order in &orders {
            assert_eq!(order.v, ORDER_PLACED_VERSION);
            assert_eq!(order.order_token.product_id(), order.product_id);
            assert!(order.quantity > 0);
        }
        // What decodes re-encodes to a body that decodes to the same orders.
        let decoded = OrderPlaced::decode_all(&OrderPlaced::encode_all(&orders))
            .expect("re-encoded orders decode");
        assert_eq!(decoded, orders);
    }
});
