//! `OrderPlaced`: the order message's body, JSON with a version field so that consumers
//! can refuse what they do not understand instead of guessing.
//!
//! A message carries one order (a JSON object: reconcile's re-publish, a lone winner) or
//! several orders of one product (a JSON array: winners the gateway sent together, under one
//! transactional message). [`OrderPlaced::decode_all`] reads both.

use serde::{Deserialize, Serialize};

use crate::ids::{OrderToken, ProductId, UserId};

/// The version this code writes and reads.
pub const ORDER_PLACED_VERSION: u32 = 1;
/// An order's JSON larger than this is not ours.
const MAX_BODY_LEN: usize = 1024;
/// Most orders one message may carry.
pub const MAX_ORDERS_PER_MESSAGE: usize = 256;
/// A W3C `traceparent` is 55 characters; anything much longer is not one.
const MAX_TRACEPARENT_LEN: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderPlaced {
    pub v: u32,
    pub order_token: OrderToken,
    pub user_id: UserId,
    pub product_id: ProductId,
    pub quantity: u32,
    pub reserved_at_ms: i64,
    /// The W3C trace context of the purchase, for an order travelling with others (a
    /// message's `traceparent` property can name only one trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("the body is {0} bytes, more than an order message can be")]
    TooLarge(usize),
    #[error("the body is not an OrderPlaced message: {0}")]
    Json(#[from] serde_json::Error),
    #[error("message version {0} is not understood")]
    UnknownVersion(u32),
    #[error("the order token names product {token} but the message says {message}")]
    ProductMismatch {
        token: ProductId,
        message: ProductId,
    },
    #[error("quantity must be at least 1")]
    ZeroQuantity,
    #[error("the traceparent is {0} characters, longer than any trace context")]
    TraceparentTooLong(usize),
    #[error("the message holds no order")]
    NoOrders,
    #[error("the message holds {0} orders, more than {MAX_ORDERS_PER_MESSAGE}")]
    TooManyOrders(usize),
}

impl OrderPlaced {
    pub fn new(
        order_token: OrderToken,
        user_id: UserId,
        quantity: u32,
        reserved_at_ms: i64,
    ) -> Self {
        Self {
            v: ORDER_PLACED_VERSION,
            product_id: order_token.product_id(),
            order_token,
            user_id,
            quantity,
            reserved_at_ms,
            traceparent: None,
        }
    }

    /// The same order, carrying the purchase's trace context.
    pub fn with_traceparent(mut self, traceparent: Option<String>) -> Self {
        self.traceparent = traceparent;
        self
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("OrderPlaced always serialises")
    }

    /// The body of a message carrying `orders`: the object itself for one, an array for more.
    ///
    /// # Panics
    /// When `orders` is empty.
    pub fn encode_all(orders: &[Self]) -> Vec<u8> {
        match orders {
            [] => panic!("a message holds at least one order"),
            [one] => one.encode(),
            several => serde_json::to_vec(several).expect("OrderPlaced always serialises"),
        }
    }

    /// Decodes a body of one order (an object) or several (an array), each validated as
    /// [`Self::decode`] does; a single bad order refuses the whole body.
    pub fn decode_all(body: &[u8]) -> Result<Vec<Self>, DecodeError> {
        let is_array = body
            .iter()
            .find(|byte| !byte.is_ascii_whitespace())
            .is_some_and(|&byte| byte == b'[');
        if !is_array {
            return Self::decode(body).map(|order| vec![order]);
        }
        if body.len() > MAX_BODY_LEN * MAX_ORDERS_PER_MESSAGE {
            return Err(DecodeError::TooLarge(body.len()));
        }
        let orders: Vec<Self> = serde_json::from_slice(body)?;
        match orders.len() {
            0 => return Err(DecodeError::NoOrders),
            n if n > MAX_ORDERS_PER_MESSAGE => return Err(DecodeError::TooManyOrders(n)),
            _ => {}
        }
        orders.into_iter().map(Self::validated).collect()
    }

    /// Decodes and validates a body: a message that fails here can never succeed, so the
    /// consumer records it and moves on rather than retrying.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        if body.len() > MAX_BODY_LEN {
            return Err(DecodeError::TooLarge(body.len()));
        }
        Self::validated(serde_json::from_slice(body)?)
    }

    fn validated(message: Self) -> Result<Self, DecodeError> {
        if message.v != ORDER_PLACED_VERSION {
            return Err(DecodeError::UnknownVersion(message.v));
        }
        if message.order_token.product_id() != message.product_id {
            return Err(DecodeError::ProductMismatch {
                token: message.order_token.product_id(),
                message: message.product_id,
            });
        }
        if message.quantity == 0 {
            return Err(DecodeError::ZeroQuantity);
        }
        if let Some(len) = message.traceparent.as_ref().map(String::len)
            && len > MAX_TRACEPARENT_LEN
        {
            return Err(DecodeError::TraceparentTooLong(len));
        }
        Ok(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> OrderPlaced {
        OrderPlaced::new(
            OrderToken::new(ProductId(5), 1),
            UserId(9),
            1,
            1_700_000_000_000,
        )
    }

    #[test]
    fn an_encoded_message_decodes_to_itself() {
        assert_eq!(OrderPlaced::decode(&sample().encode()).unwrap(), sample());
    }

    #[test]
    fn a_message_whose_token_names_another_product_is_refused() {
        let mut message = sample();
        message.product_id = ProductId(6);
        assert!(matches!(
            OrderPlaced::decode(&message.encode()),
            Err(DecodeError::ProductMismatch { .. })
        ));
    }

    #[test]
    fn unknown_versions_and_fields_are_refused() {
        let mut message = sample();
        message.v = 2;
        assert!(matches!(
            OrderPlaced::decode(&message.encode()),
            Err(DecodeError::UnknownVersion(2))
        ));
        let mut value = serde_json::to_value(sample()).unwrap();
        value["extra"] = 1.into();
        assert!(OrderPlaced::decode(value.to_string().as_bytes()).is_err());
    }

    fn batch() -> Vec<OrderPlaced> {
        (1..=3)
            .map(|n| {
                OrderPlaced::new(OrderToken::new(ProductId(5), n), UserId(n as u64), 1, 1)
                    .with_traceparent(Some(format!("00-{n:032x}-{n:016x}-01")))
            })
            .collect()
    }

    #[test]
    fn one_order_is_encoded_as_the_object_a_single_order_message_always_was() {
        assert_eq!(OrderPlaced::encode_all(&[sample()]), sample().encode());
        assert_eq!(
            OrderPlaced::decode_all(&sample().encode()).unwrap(),
            vec![sample()]
        );
    }

    #[test]
    fn several_orders_travel_as_an_array_each_with_its_trace_context() {
        let body = OrderPlaced::encode_all(&batch());
        assert_eq!(body.first(), Some(&b'['));
        assert_eq!(OrderPlaced::decode_all(&body).unwrap(), batch());
    }

    #[test]
    fn one_bad_order_refuses_the_whole_message() {
        let mut orders = batch();
        orders[1].quantity = 0;
        assert!(matches!(
            OrderPlaced::decode_all(&OrderPlaced::encode_all(&orders)),
            Err(DecodeError::ZeroQuantity)
        ));
        assert!(matches!(
            OrderPlaced::decode_all(b" []"),
            Err(DecodeError::NoOrders)
        ));
        let too_many = vec![sample(); MAX_ORDERS_PER_MESSAGE + 1];
        assert!(matches!(
            OrderPlaced::decode_all(&serde_json::to_vec(&too_many).unwrap()),
            Err(DecodeError::TooManyOrders(_))
        ));
        let long = sample().with_traceparent(Some("0".repeat(500)));
        assert!(matches!(
            OrderPlaced::decode_all(&long.encode()),
            Err(DecodeError::TraceparentTooLong(500))
        ));
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(body in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = OrderPlaced::decode(&body);
            let _ = OrderPlaced::decode_all(&body);
        }
    }
}
