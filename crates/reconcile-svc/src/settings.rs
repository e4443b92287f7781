//! Reconcile's settings: its own section, and the shared ones it reads.

use order_queue::MqSettings;
use order_store::MysqlSettings;
use platform::ServiceSettings;
use platform::settings::{AdminSettings, OrderSettings, TelemetrySettings};
use secrecy::SecretString;
use serde::Deserialize;
use stock_cache::RedisSettings;

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub reconcile: ReconcileSettings,
    pub redis: RedisSettings,
    pub mysql: MysqlSettings,
    /// Re-publishes go out through a plain producer.
    pub rocketmq: MqSettings,
    /// The token of the daemon's `/admin/reconcile`.
    #[serde(default)]
    pub admin: AdminSettings,
    pub telemetry: TelemetrySettings,
    /// How long past its deadline an order with no deadline message is expired.
    #[serde(default)]
    pub orders: OrderSettings,
}

impl ServiceSettings for Settings {
    fn telemetry(&self) -> &TelemetrySettings {
        &self.telemetry
    }

    fn secrets(&self) -> Vec<(String, &SecretString)> {
        vec![("admin.token".to_owned(), &self.admin.token)]
    }

    fn check(&self) -> Result<(), String> {
        self.redis.check()?;
        self.mysql.check()?;
        self.rocketmq.check()
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ReconcileSettings {
    pub listen: String,
    pub schedule: String,
    pub grace_secs: u64,
    pub policy: String,
    pub scan_batch: usize,
    /// How long the lease of one run lasts between renewals (a run renews it every third of
    /// this while it lasts); a runner that dies lets it expire after this.
    #[serde(default = "default_lease_secs")]
    pub lease_secs: u64,
}

fn default_lease_secs() -> u64 {
    900
}
