//! What the services configure about the queue.

use serde::Deserialize;

/// Where the broker is and what the order messages are called.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct MqSettings {
    /// Name server address(es), `host:port`, several separated by `;`.
    pub name_server: String,
    /// The order topic (`seckill-order`).
    pub topic: String,
    /// The order tag (`order`); the subscriber filters on it, `""` or `"*"` takes every tag.
    pub tag: String,
    /// Group of the transactional producer. The broker sends check-backs to any live member
    /// of this group, so every gateway replica uses the same one.
    pub producer_group: String,
    /// Clustering consumer group: the topic's queues are shared among its members.
    pub consumer_group: String,
    /// Timeout of one send, in milliseconds (capped at `u32::MAX`).
    pub send_timeout_ms: u64,
    /// Read and write queues of the topic when [`crate::ensure_topic`] creates it; the ceiling
    /// on consumer parallelism.
    pub queue_count: u32,
    /// The topic of the payment deadlines ([`crate::deadline`]). Defaulted, so configuration
    /// written before deadlines existed still loads.
    #[serde(default = "default_deadline_topic")]
    pub deadline_topic: String,
    /// Clustering consumer group that receives the deadlines when they fall due.
    #[serde(default = "default_deadline_consumer_group")]
    pub deadline_consumer_group: String,
}

fn default_deadline_topic() -> String {
    "seckill-deadline".into()
}

fn default_deadline_consumer_group() -> String {
    "seckill-deadline-expirer".into()
}

impl MqSettings {
    pub(crate) fn send_timeout_ms_u32(&self) -> u32 {
        u32::try_from(self.send_timeout_ms).unwrap_or(u32::MAX)
    }

    /// The subscription expression for [`Self::tag`].
    pub(crate) fn tag_expression(&self) -> &str {
        match self.tag.trim() {
            "" => "*",
            tag => tag,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(tag: &str) -> MqSettings {
        MqSettings {
            name_server: "127.0.0.1:9876".into(),
            topic: "seckill-order".into(),
            tag: tag.into(),
            producer_group: "p".into(),
            consumer_group: "c".into(),
            send_timeout_ms: u64::MAX,
            queue_count: 4,
            deadline_topic: default_deadline_topic(),
            deadline_consumer_group: default_deadline_consumer_group(),
        }
    }

    #[test]
    fn an_empty_tag_subscribes_to_every_tag() {
        assert_eq!(settings("").tag_expression(), "*");
        assert_eq!(settings("order").tag_expression(), "order");
    }

    #[test]
    fn a_huge_send_timeout_is_capped() {
        assert_eq!(settings("order").send_timeout_ms_u32(), u32::MAX);
    }

    #[test]
    fn settings_written_before_deadlines_existed_still_load() {
        let settings: MqSettings = serde_json::from_str(
            r#"{"name_server":"n:1","topic":"t","tag":"order","producer_group":"p",
                "consumer_group":"c","send_timeout_ms":1,"queue_count":4}"#,
        )
        .unwrap();
        assert_eq!(settings.deadline_topic, "seckill-deadline");
        assert_eq!(settings.deadline_consumer_group, "seckill-deadline-expirer");
    }
}
