//! The consumer's settings: its own section, and the shared ones it reads.

use order_queue::MqSettings;
use order_store::MysqlSettings;
use platform::ServiceSettings;
use platform::settings::{OrderSettings, TelemetrySettings};
use secrecy::SecretString;
use serde::Deserialize;
use stock_cache::RedisSettings;

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub consumer: ConsumerSettings,
    /// The flows it marks written, and the units an expired order gives back.
    pub redis: RedisSettings,
    pub mysql: MysqlSettings,
    pub rocketmq: MqSettings,
    pub telemetry: TelemetrySettings,
    /// The payment window each written order is given.
    #[serde(default)]
    pub orders: OrderSettings,
}

impl ServiceSettings for Settings {
    fn telemetry(&self) -> &TelemetrySettings {
        &self.telemetry
    }

    /// None: the consumer signs and verifies nothing.
    fn secrets(&self) -> Vec<(String, &SecretString)> {
        Vec::new()
    }

    fn check(&self) -> Result<(), String> {
        self.redis.check()?;
        self.mysql.check()?;
        self.rocketmq.check()
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ConsumerSettings {
    pub listen: String,
    pub batch_size: u32,
    pub concurrency: u32,
    pub max_reconsume_times: i32,
    /// While the consumer keeps up, each queue is pulled at most this often (0: at once).
    pub pull_linger_ms: u64,
    /// How often the group's backlog is read from the broker and exported, in orders.
    pub backlog_export_secs: u64,
    /// Whether this replica runs the expirer (the deadline consumer). The deadlines are
    /// sent either way.
    pub expire_orders: bool,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use platform::settings::from_sources;

    use super::*;

    const DEFAULT: &str = include_str!("../../../config/default.toml");

    #[test]
    fn a_deployment_without_the_gateways_secrets_starts() {
        // Outside local mode, with no admin token, token key or webhook secret set: the
        // consumer relies on none of them.
        let settings: Result<Settings, _> = from_sources(&[DEFAULT], BTreeMap::new());
        assert!(settings.is_ok(), "{:?}", settings.err());
    }

    #[test]
    fn a_misspelt_consumer_setting_is_refused() {
        let env = [("SECKILL_CONSUMER__BATCH_SISE", "7")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let message = from_sources::<Settings>(&[DEFAULT], env)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("SECKILL_CONSUMER__BATCH_SIZE"),
            "{message}"
        );
    }
}
