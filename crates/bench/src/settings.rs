//! What the bench tools read of the deployment's settings: where the servers are, the
//! queue, and the purchase-token keys they sign with.

use std::collections::BTreeMap;

use order_queue::MqSettings;
use order_store::MysqlSettings;
use platform::ServiceSettings;
use platform::settings::{TelemetrySettings, TokenSettings};
use secrecy::SecretString;
use serde::Deserialize;
use stock_cache::RedisSettings;

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub redis: RedisSettings,
    pub mysql: MysqlSettings,
    pub rocketmq: MqSettings,
    pub tokens: TokenSettings,
    pub telemetry: TelemetrySettings,
}

impl Settings {
    /// The settings as the services read them (`config/`, `SECKILL_ENV`, `SECKILL_*`).
    pub fn load() -> anyhow::Result<Self> {
        Ok(platform::settings::load()?)
    }
}

impl ServiceSettings for Settings {
    fn telemetry(&self) -> &TelemetrySettings {
        &self.telemetry
    }

    fn secrets(&self) -> Vec<(String, &SecretString)> {
        self.tokens.secrets().collect()
    }

    fn check(&self) -> Result<(), String> {
        self.redis.check()?;
        self.mysql.check()?;
        self.rocketmq.check()?;
        self.tokens.check()
    }

    fn token_keys_mut(&mut self) -> Option<&mut BTreeMap<String, SecretString>> {
        Some(&mut self.tokens.keys)
    }
}
