//! Typed settings. Every service reads the same file set and takes the sections it needs,
//! so one ConfigMap serves the whole deployment.

use std::collections::BTreeMap;
use std::path::PathBuf;

use config::{Config, Environment, File, FileFormat};
use secrecy::SecretString;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub gateway: GatewaySettings,
    pub consumer: ConsumerSettings,
    pub reconcile: ReconcileSettings,
    pub redis: RedisSettings,
    pub mysql: MysqlSettings,
    /// The queue's own settings type, so the section maps one to one onto the client.
    pub rocketmq: order_queue::MqSettings,
    pub auth: AuthSettings,
    pub admin: AdminSettings,
    pub tokens: TokenSettings,
    pub rate_limit: RateLimitSettings,
    pub telemetry: TelemetrySettings,
}

#[derive(Debug, Clone, Deserialize)]
pub struct GatewaySettings {
    pub listen: String,
    pub max_body_bytes: usize,
    /// Largest header block accepted (431 above it).
    pub max_header_bytes: usize,
    pub shutdown_grace_secs: u64,
    /// How long an idle keep-alive connection stays open (0: closed after each answer).
    pub keep_alive_secs: u64,
    /// How long an admin reload waits for the order consumers to empty their backlog.
    pub reload_drain_secs: u64,
    /// Most orders of one product under one transactional message.
    pub orders_per_message: usize,
    /// Most transactional sends under way at once; winners queue behind them and leave
    /// together.
    pub sends_in_flight: usize,
    /// Longest a winner waits behind sends under way before it leaves in one of its own.
    pub send_patience_ms: u64,
    /// How long a message's first winner waits for others to join it (unless it fills).
    pub send_linger_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ConsumerSettings {
    pub listen: String,
    pub batch_size: u32,
    pub concurrency: u32,
    pub max_reconsume_times: i32,
    /// While the consumer keeps up, each queue is pulled at most this often (0: at once).
    pub pull_linger_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ReconcileSettings {
    pub listen: String,
    pub schedule: String,
    pub grace_secs: u64,
    pub policy: String,
    pub scan_batch: usize,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RedisSettings {
    pub url: String,
    pub key_prefix: String,
    pub pool_size: usize,
    pub timeout_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct MysqlSettings {
    /// Holds the password, so it is kept out of Debug output.
    pub url: SecretString,
    pub pool_size: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// `X-User-Id: <u64>`: trusted header, for local runs and behind an authenticating proxy.
    Header,
    /// `Authorization: Bearer <HS256 JWT>` with `sub` = user id.
    Jwt,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AuthSettings {
    pub mode: AuthMode,
    pub jwt_secret: SecretString,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AdminSettings {
    pub token: SecretString,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TokenSettings {
    pub current_key_id: String,
    pub ttl_secs: u64,
    pub keys: BTreeMap<String, SecretString>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RateLimitSettings {
    pub global_per_sec: u32,
    pub user_per_sec: u32,
    pub user_burst: u32,
    /// Most purchases one instance takes to Redis and the broker at once; past it a
    /// purchase is refused at once (429) rather than queued.
    pub purchases_in_flight: u32,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TelemetrySettings {
    pub otlp_endpoint: String,
    pub log_format: String,
    pub log_filter: String,
}

impl Settings {
    /// Reads `$SECKILL_CONFIG_DIR` (default `config/`): `default.toml`, then
    /// `<SECKILL_ENV>.toml` when that variable is set, then `SECKILL_*` variables.
    pub fn load() -> Result<Self, config::ConfigError> {
        let dir = std::env::var_os("SECKILL_CONFIG_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("config"));
        let mut builder = Config::builder().add_source(File::from(dir.join("default.toml")));
        if let Ok(env) = std::env::var("SECKILL_ENV") {
            builder = builder.add_source(File::from(dir.join(format!("{env}.toml"))));
        }
        builder = builder.add_source(Self::environment(None));
        builder.build()?.try_deserialize()
    }

    /// The same layering from strings, so tests need neither files nor the process environment.
    pub fn from_sources(
        default_toml: &str,
        env: BTreeMap<String, String>,
    ) -> Result<Self, config::ConfigError> {
        Config::builder()
            .add_source(File::from_str(default_toml, FileFormat::Toml))
            .add_source(Self::environment(Some(env)))
            .build()?
            .try_deserialize()
    }

    fn environment(source: Option<BTreeMap<String, String>>) -> Environment {
        let env = Environment::with_prefix("SECKILL")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true);
        match source {
            Some(map) => env.source(Some(map.into_iter().collect())),
            None => env,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    const DEFAULT: &str = include_str!("../../../config/default.toml");

    #[test]
    fn the_shipped_defaults_parse() {
        let settings = Settings::from_sources(DEFAULT, BTreeMap::new()).unwrap();
        assert_eq!(settings.gateway.listen, "127.0.0.1:8080");
        assert_eq!(settings.auth.mode, AuthMode::Header);
        assert_eq!(settings.admin.token.expose_secret(), "dev-admin-token");
    }

    #[test]
    fn environment_variables_override_the_file() {
        let env = BTreeMap::from([
            (
                "SECKILL_REDIS__URL".to_owned(),
                "redis://elsewhere:1".to_owned(),
            ),
            ("SECKILL_CONSUMER__BATCH_SIZE".to_owned(), "7".to_owned()),
            ("SECKILL_AUTH__MODE".to_owned(), "jwt".to_owned()),
            (
                "SECKILL_TOKENS__KEYS__K2".to_owned(),
                "a-second-key-of-16".to_owned(),
            ),
        ]);
        let settings = Settings::from_sources(DEFAULT, env).unwrap();
        assert_eq!(settings.redis.url, "redis://elsewhere:1");
        assert_eq!(settings.consumer.batch_size, 7);
        assert_eq!(settings.auth.mode, AuthMode::Jwt);
        assert_eq!(settings.tokens.keys.len(), 2);
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let settings = Settings::from_sources(DEFAULT, BTreeMap::new()).unwrap();
        let debug = format!("{settings:?}");
        assert!(!debug.contains("dev-admin-token"));
        assert!(!debug.contains("seckill:seckill@"));
    }

    #[test]
    fn a_bad_value_is_an_error_not_a_default() {
        let env = BTreeMap::from([("SECKILL_AUTH__MODE".to_owned(), "magic".to_owned())]);
        assert!(Settings::from_sources(DEFAULT, env).is_err());
    }
}
