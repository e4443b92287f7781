//! `OrderPlaced`: the order message's body, JSON with a version field so that consumers
//! can refuse what they do not understand instead of guessing.

use serde::{Deserialize, Serialize};

use crate::ids::{OrderToken, ProductId, UserId};

/// The version this code writes and reads.
pub const ORDER_PLACED_VERSION: u32 = 1;
/// A body larger than this is not ours.
const MAX_BODY_LEN: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderPlaced {
    pub v: u32,
    pub order_token: OrderToken,
    pub user_id: UserId,
    pub product_id: ProductId,
    pub quantity: u32,
    pub reserved_at_ms: i64,
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
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("OrderPlaced always serialises")
    }

    /// Decodes and validates a body: a message that fails here can never succeed, so the
    /// consumer records it and moves on rather than retrying.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        if body.len() > MAX_BODY_LEN {
            return Err(DecodeError::TooLarge(body.len()));
        }
        let message: Self = serde_json::from_slice(body)?;
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

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(body in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = OrderPlaced::decode(&body);
        }
    }
}
