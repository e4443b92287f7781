//! The order message on the wire: topic and tag from the settings, keys = the order tokens
//! it carries (so the broker's check-back and `queryMsgByKey` find them), body = the
//! `OrderPlaced` JSON (an object for one order, an array for several of one product), and
//! the W3C `traceparent` as a user property so one trace spans gateway → consumer (each order
//! of several also carries its own in the body).

use domain::{MAX_ORDERS_PER_MESSAGE, OrderPlaced, OrderToken};
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_model::common::message::{MessageConst, MessageTrait};

use crate::{MqError, Result};

/// The user property that carries the W3C trace context.
pub const TRACEPARENT_PROPERTY: &str = "traceparent";

/// Builds the message for one `order`: the tests' shorthand for `orders_message`.
#[cfg(test)]
pub(crate) fn order_message(
    topic: &str,
    tag: &str,
    order: &OrderPlaced,
    traceparent: Option<&str>,
) -> Result<Message> {
    orders_message(topic, tag, std::slice::from_ref(order), traceparent)
}

/// Builds one message for `orders`: at least one, at most `MAX_ORDERS_PER_MESSAGE`, all of
/// one product (its local transaction runs in that product's Redis slot).
pub(crate) fn orders_message(
    topic: &str,
    tag: &str,
    orders: &[OrderPlaced],
    traceparent: Option<&str>,
) -> Result<Message> {
    let Some(first) = orders.first() else {
        return Err(MqError::InvalidMessage("a message needs an order".into()));
    };
    if orders.len() > MAX_ORDERS_PER_MESSAGE {
        return Err(MqError::InvalidMessage(format!(
            "{} orders in one message, more than {MAX_ORDERS_PER_MESSAGE}",
            orders.len()
        )));
    }
    if orders.iter().any(|o| o.product_id != first.product_id) {
        return Err(MqError::InvalidMessage(
            "the orders of one message must be of one product".into(),
        ));
    }
    let keys = orders.iter().map(|o| o.order_token.to_string()).collect();
    let mut builder = Message::builder()
        .topic(topic)
        .tags(tag)
        .keys(keys)
        .body(OrderPlaced::encode_all(orders));
    if let Some(traceparent) = traceparent {
        builder = builder
            .raw_property(TRACEPARENT_PROPERTY, traceparent)
            .map_err(|error| MqError::InvalidMessage(error.to_string()))?;
    }
    builder
        .build()
        .map_err(|error| MqError::InvalidMessage(error.to_string()))
}

/// The order tokens among a message's keys (space-separated): those that parse.
pub(crate) fn order_tokens_of(message: &dyn MessageTrait) -> Vec<OrderToken> {
    let Some(keys) = message.get_keys() else {
        return Vec::new();
    };
    keys.as_str()
        .split(MessageConst::KEY_SEPARATOR)
        .filter_map(|key| key.parse().ok())
        .collect()
}

/// One received message, copied out of the client's types so handlers depend on nothing but
/// this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The producer-assigned unique id (`UNIQ_KEY`), which stays the same on redelivery;
    /// the broker's offset id when there is none.
    pub msg_id: String,
    /// The message keys: the order tokens, unparsed (the handler decides what a bad one means).
    pub key: Option<String>,
    /// The body, to be decoded with `OrderPlaced::decode_all`.
    pub body: Vec<u8>,
    /// 0 on first delivery, then 1, 2, … on each redelivery after `RetryLater`.
    pub reconsume_times: i32,
    /// The W3C trace context the producer attached, if any.
    pub traceparent: Option<String>,
}

impl Delivery {
    pub(crate) fn from_ext(message: &MessageExt) -> Self {
        let property = |name: &str| message.property(&name.into());
        Self {
            msg_id: property(MessageConst::PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| message.msg_id().clone())
                .to_string(),
            key: message.get_keys().map(|keys| keys.to_string()),
            body: message.body().map(|body| body.to_vec()).unwrap_or_default(),
            reconsume_times: message.reconsume_times(),
            traceparent: property(TRACEPARENT_PROPERTY).map(|value| value.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::{ProductId, UserId};

    fn order() -> OrderPlaced {
        OrderPlaced::new(
            OrderToken::new(ProductId(3), 0xfeed),
            UserId(9),
            2,
            1_700_000_000_000,
        )
    }

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn an_order_message_carries_topic_tag_key_body_and_traceparent() {
        let message = order_message("t", "order", &order(), Some(TRACEPARENT)).unwrap();
        assert_eq!(message.topic().as_str(), "t");
        assert_eq!(message.tags(), Some("order"));
        assert_eq!(
            message.get_keys().unwrap().as_str(),
            "3-0000000000000000000000000000feed"
        );
        assert_eq!(OrderPlaced::decode(message.body_slice()).unwrap(), order());
        assert_eq!(message.property(TRACEPARENT_PROPERTY), Some(TRACEPARENT));
        assert_eq!(order_tokens_of(&message), vec![order().order_token]);
    }

    #[test]
    fn a_message_of_several_orders_names_each_token_as_a_key() {
        let orders: Vec<OrderPlaced> = (1..=3)
            .map(|n| OrderPlaced::new(OrderToken::new(ProductId(3), n), UserId(n as u64), 1, 1))
            .collect();
        let message = orders_message("t", "order", &orders, Some(TRACEPARENT)).unwrap();
        let tokens: Vec<OrderToken> = orders.iter().map(|o| o.order_token.clone()).collect();
        assert_eq!(order_tokens_of(&message), tokens);
        assert_eq!(
            OrderPlaced::decode_all(message.body_slice()).unwrap(),
            orders
        );
    }

    #[test]
    fn orders_of_two_products_or_none_make_no_message() {
        let other = OrderPlaced::new(OrderToken::new(ProductId(4), 1), UserId(1), 1, 1);
        assert!(orders_message("t", "order", &[order(), other], None).is_err());
        assert!(orders_message("t", "order", &[], None).is_err());
    }

    #[test]
    fn a_message_without_traceparent_has_no_such_property() {
        let message = order_message("t", "order", &order(), None).unwrap();
        assert_eq!(message.property(TRACEPARENT_PROPERTY), None);
    }

    #[test]
    fn a_key_that_is_not_an_order_token_yields_none() {
        let message = Message::builder()
            .topic("t")
            .key("not-a-token")
            .body(b"{}".to_vec())
            .build()
            .unwrap();
        assert!(order_tokens_of(&message).is_empty());
        let keyless = Message::builder().topic("t").build().unwrap();
        assert!(order_tokens_of(&keyless).is_empty());
    }

    #[test]
    fn a_delivery_copies_key_body_traceparent_and_unique_id() {
        let sent = order_message("t", "order", &order(), Some(TRACEPARENT)).unwrap();
        let mut received = MessageExt {
            message: sent,
            ..MessageExt::default()
        };
        received.put_property(
            MessageConst::PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX.into(),
            "UNIQ1".into(),
        );
        received.set_reconsume_times(2);
        let delivery = Delivery::from_ext(&received);
        assert_eq!(delivery.msg_id, "UNIQ1");
        assert_eq!(
            delivery.key.as_deref(),
            Some("3-0000000000000000000000000000feed")
        );
        assert_eq!(OrderPlaced::decode(&delivery.body).unwrap(), order());
        assert_eq!(delivery.reconsume_times, 2);
        assert_eq!(delivery.traceparent.as_deref(), Some(TRACEPARENT));
    }
}
