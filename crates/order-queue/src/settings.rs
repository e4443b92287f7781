//! What the services configure about the queue.

use std::sync::Arc;

use rocketmq_client_rust::{AclClientRPCHook, ClientRpcHook, SessionCredentials};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// Where the broker is and what the order messages are called.
#[derive(Debug, Clone, Deserialize)]
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
    /// ACL credentials every client of the service signs its requests with (producers,
    /// consumers, the admin clients), for a broker that checks them. Both empty: none.
    #[serde(default)]
    pub access_key: String,
    #[serde(default = "no_secret")]
    pub secret_key: SecretString,
}

fn no_secret() -> SecretString {
    SecretString::from(String::new())
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

    /// The hook that signs each request with the ACL credentials, when they are set. Which
    /// of the two is missing when only one is set is [`Self::check`]'s to say.
    pub(crate) fn acl_hook(&self) -> Option<Arc<ClientRpcHook>> {
        (!self.access_key.is_empty()).then(|| {
            Arc::new(AclClientRPCHook::new(SessionCredentials::with_keys(
                self.access_key.as_str(),
                self.secret_key.expose_secret(),
            ))) as Arc<ClientRpcHook>
        })
    }

    /// Refuses credentials half set, the key without its secret or the other way round,
    /// naming both settings and their variables.
    pub fn check(&self) -> Result<(), String> {
        let problem = match (
            self.access_key.is_empty(),
            self.secret_key.expose_secret().is_empty(),
        ) {
            (false, true) => "rocketmq.access_key is set but rocketmq.secret_key is not",
            (true, false) => "rocketmq.secret_key is set but rocketmq.access_key is not",
            _ => return Ok(()),
        };
        Err(format!(
            "{problem} (SECKILL_ROCKETMQ__ACCESS_KEY, SECKILL_ROCKETMQ__SECRET_KEY): set both \
             for a broker that checks ACL credentials, or neither"
        ))
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
            access_key: String::new(),
            secret_key: no_secret(),
        }
    }

    #[test]
    fn without_credentials_no_request_is_signed() {
        assert!(settings("order").acl_hook().is_none());
        assert_eq!(settings("order").check(), Ok(()));
    }

    #[test]
    fn credentials_sign_every_request_and_half_of_them_is_a_problem() {
        let mut signed = settings("order");
        signed.access_key = "seckill".into();
        signed.secret_key = SecretString::from("a-secret".to_owned());
        assert!(signed.acl_hook().is_some());
        assert_eq!(signed.check(), Ok(()));

        let mut key_only = settings("order");
        key_only.access_key = "seckill".into();
        let problem = key_only.check().unwrap_err();
        assert!(
            problem.contains("rocketmq.access_key is set but rocketmq.secret_key is not"),
            "{problem}"
        );
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
