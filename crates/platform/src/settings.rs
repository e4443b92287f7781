//! Typed settings. Every service reads the same file set and takes the sections it needs,
//! so one ConfigMap serves the whole deployment.

use std::collections::BTreeMap;
use std::path::PathBuf;

use config::{Config, Environment, File, FileFormat};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

mod unknown_keys;

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
    /// Only a secret: a file may well have no `[admin]` table at all.
    #[serde(default)]
    pub admin: AdminSettings,
    pub tokens: TokenSettings,
    pub rate_limit: RateLimitSettings,
    pub telemetry: TelemetrySettings,
    /// After the purchase: the payment window and how buyers watch their orders.
    #[serde(default)]
    pub orders: OrderSettings,
    /// Only a secret, like `[admin]`.
    #[serde(default)]
    pub payments: PaymentSettings,
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
    /// How often the group's backlog is read from the broker and exported, in orders.
    pub backlog_export_secs: u64,
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
    #[serde(default = "default_reconcile_lease_secs")]
    pub lease_secs: u64,
}

fn default_reconcile_lease_secs() -> u64 {
    900
}

#[derive(Debug, Clone, Deserialize)]
pub struct RedisSettings {
    pub url: String,
    pub key_prefix: String,
    pub pool_size: usize,
    pub timeout_ms: u64,
    /// Replicas that must acknowledge a winning pre-deduct (Redis `WAIT`) before its message
    /// is sent; 0: none are waited for.
    #[serde(default)]
    pub wait_replicas: u32,
    /// How long that `WAIT` may take, in ms; 0: `timeout_ms`.
    #[serde(default)]
    pub wait_timeout_ms: u64,
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
    /// Checked at start-up in jwt mode (see [`Settings::load`]); unset is empty.
    #[serde(default = "unset_secret")]
    pub jwt_secret: SecretString,
    /// The `iss` a buyer's JWT must carry; empty: not checked.
    #[serde(default)]
    pub jwt_issuer: String,
    /// The `aud` a buyer's JWT must carry (one of, when it carries several); empty: not
    /// checked.
    #[serde(default)]
    pub jwt_audience: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AdminSettings {
    /// Unset is empty, refused at start-up outside local mode.
    #[serde(default = "unset_secret")]
    pub token: SecretString,
}

impl Default for AdminSettings {
    fn default() -> Self {
        Self {
            token: unset_secret(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct TokenSettings {
    pub current_key_id: String,
    pub ttl_secs: u64,
    /// From one configuration layer only: see [`Settings::load`].
    #[serde(default)]
    pub keys: BTreeMap<String, SecretString>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct OrderSettings {
    /// Seconds a confirmed order waits for its payment before it expires and its units go
    /// back on sale.
    pub payment_window_secs: u64,
    /// Seconds past `pay_by` after which reconcile expires an order whose deadline message
    /// never came (the broker lost it, or every expirer was down).
    pub expiry_grace_secs: u64,
    /// An SSE stream or a long-poll reads its order again at least this often, events or
    /// not: Redis pub/sub drops what is published while a gateway is reconnecting.
    pub watch_recheck_secs: u64,
    /// Event streams and long-polls one gateway holds open at once; past it, 429.
    pub max_watchers: usize,
}

impl Default for OrderSettings {
    fn default() -> Self {
        Self {
            payment_window_secs: 900,
            expiry_grace_secs: 60,
            watch_recheck_secs: 5,
            max_watchers: 10_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct PaymentSettings {
    /// The HMAC-SHA256 key the payment provider signs its callbacks with. Unset is empty,
    /// refused at start-up outside local mode.
    #[serde(default = "unset_secret")]
    pub webhook_secret: SecretString,
}

impl Default for PaymentSettings {
    fn default() -> Self {
        Self {
            webhook_secret: unset_secret(),
        }
    }
}

fn unset_secret() -> SecretString {
    SecretString::from("")
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

/// The `SECKILL_ENV` of local runs: `config/local.toml` holds their public development
/// secrets, and only in this mode are such secrets accepted.
pub const LOCAL_ENV: &str = "local";

/// Shortest secret accepted outside local mode: 256 bits, the size of an HS256 / HMAC-SHA256
/// key, so a secret is never the weak link of what it signs.
pub const MIN_SECRET_BYTES: usize = 32;

/// The secrets of `config/local.toml` (and of `default.toml` before them) and the
/// placeholders of the Secret template: public, so never accepted outside local mode,
/// whatever their length.
const SHIPPED_SECRETS: &[&str] = &[
    "dev-admin-token",
    "dev-jwt-secret-change-me",
    "dev-token-key-change-me",
    "dev-webhook-secret-change-me",
    "CHANGE-ME",
    "CHANGE-ME-at-least-16-bytes",
    "CHANGE-ME-32-or-more-random-bytes",
];

impl Settings {
    /// Reads `$SECKILL_CONFIG_DIR` (default `config/`): `default.toml`, then
    /// `<SECKILL_ENV>.toml` when that variable is set, then `SECKILL_*` variables.
    ///
    /// `tokens.keys` comes from the highest of those layers that defines any key, alone:
    /// maps would otherwise merge across layers, and a key dropped from the environment (a
    /// rotation) would live on from a file. Outside local mode (`SECKILL_ENV=local`) every
    /// secret in use must be set, at least [`MIN_SECRET_BYTES`] long and none this
    /// repository ships; otherwise this is an error naming the setting.
    pub fn load() -> Result<Self, config::ConfigError> {
        let dir = std::env::var_os("SECKILL_CONFIG_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("config"));
        let env = std::env::var("SECKILL_ENV")
            .ok()
            .filter(|env| !env.is_empty());
        let mut layers: Vec<Layer> = vec![Box::new(File::from(dir.join("default.toml")))];
        if let Some(env) = &env {
            layers.push(Box::new(File::from(dir.join(format!("{env}.toml")))));
        }
        let vars = std::env::vars()
            .filter(|(name, _)| name.starts_with(unknown_keys::PREFIX))
            .collect();
        Self::from_layers(layers, vars, env.as_deref() == Some(LOCAL_ENV))
    }

    /// The same rules from strings, so tests need neither files nor the process
    /// environment: `files` (TOML, lowest first), then `env`, in local mode when `env`
    /// says `SECKILL_ENV=local`.
    pub fn from_sources(
        files: &[&str],
        env: BTreeMap<String, String>,
    ) -> Result<Self, config::ConfigError> {
        let local = env.get("SECKILL_ENV").map(String::as_str) == Some(LOCAL_ENV);
        let layers: Vec<Layer> = files
            .iter()
            .map(|toml| Box::new(File::from_str(toml, FileFormat::Toml)) as Layer)
            .collect();
        Self::from_layers(layers, env, local)
    }

    /// `files`, then the setting variables among `vars` (every `SECKILL_` variable), merged
    /// and read; a key that no setting has, from either, is an error naming it.
    fn from_layers(
        mut layers: Vec<Layer>,
        vars: BTreeMap<String, String>,
        local: bool,
    ) -> Result<Self, config::ConfigError> {
        layers.push(Box::new(Self::environment(
            unknown_keys::setting_variables(&vars),
        )));
        let mut keys = BTreeMap::new();
        let mut builder = Config::builder();
        for layer in layers {
            if let Some(layer_keys) = token_keys_of(&layer)? {
                keys = layer_keys;
            }
            builder = builder.add_source(vec![layer]);
        }
        let merged = builder.build()?.cache;
        let mut ignored = Vec::new();
        let mut settings: Self = serde_ignored::deserialize(merged.clone(), |path| {
            ignored.push(path.to_string());
        })?;
        let known: Vec<String> = unknown_keys::leaf_keys(&merged)
            .into_iter()
            .filter(|key| !ignored.contains(key))
            .collect();
        if let Some(problem) = unknown_keys::first_problem(&ignored, &known, &vars) {
            return Err(config::ConfigError::Message(problem));
        }
        settings.tokens.keys = keys;
        settings
            .check_secrets(local)
            .map_err(config::ConfigError::Message)?;
        Ok(settings)
    }

    fn environment(variables: BTreeMap<String, String>) -> Environment {
        Environment::with_prefix("SECKILL")
            .prefix_separator("_")
            .separator(unknown_keys::SEPARATOR)
            .try_parsing(true)
            .source(Some(variables.into_iter().collect()))
    }

    /// The secrets this deployment relies on, as (setting, variable, value).
    fn secrets_in_use(&self) -> Vec<(String, String, &SecretString)> {
        let mut secrets = vec![
            (
                "admin.token".to_owned(),
                "SECKILL_ADMIN__TOKEN".to_owned(),
                &self.admin.token,
            ),
            (
                "payments.webhook_secret".to_owned(),
                "SECKILL_PAYMENTS__WEBHOOK_SECRET".to_owned(),
                &self.payments.webhook_secret,
            ),
        ];
        // In header mode no JWT is ever verified, so its secret guards nothing.
        if self.auth.mode == AuthMode::Jwt {
            secrets.push((
                "auth.jwt_secret".to_owned(),
                "SECKILL_AUTH__JWT_SECRET".to_owned(),
                &self.auth.jwt_secret,
            ));
        }
        for (id, key) in &self.tokens.keys {
            secrets.push((
                format!("tokens.keys.{id}"),
                format!("SECKILL_TOKENS__KEYS__{}", id.to_uppercase()),
                key,
            ));
        }
        secrets
    }

    fn check_secrets(&self, local: bool) -> Result<(), String> {
        if let Some(problem) = self.rocketmq.credentials_problem() {
            return Err(format!(
                "{problem} (SECKILL_ROCKETMQ__ACCESS_KEY, SECKILL_ROCKETMQ__SECRET_KEY): set both \
                 for a broker that checks ACL credentials, or neither"
            ));
        }
        if !self.tokens.keys.contains_key(&self.tokens.current_key_id) {
            return Err(format!(
                "tokens.current_key_id is `{}`, but tokens.keys has no such key \
                 (set SECKILL_TOKENS__KEYS__{})",
                self.tokens.current_key_id,
                self.tokens.current_key_id.to_uppercase()
            ));
        }
        if local {
            return Ok(());
        }
        for (setting, variable, secret) in self.secrets_in_use() {
            let value = secret.expose_secret();
            let problem = if value.is_empty() {
                "is not set"
            } else if SHIPPED_SECRETS.contains(&value) {
                "is a development value shipped with seckill, public to anyone"
            } else if value.len() < MIN_SECRET_BYTES {
                "is shorter than 32 bytes"
            } else {
                continue;
            };
            return Err(format!(
                "{setting} ({variable}) {problem}: outside local mode (SECKILL_ENV={LOCAL_ENV}) \
                 every secret must be a random value of your own, at least \
                 {MIN_SECRET_BYTES} bytes long"
            ));
        }
        Ok(())
    }
}

/// One layer of configuration: a file or the environment.
type Layer = Box<dyn config::Source + Send + Sync>;

/// The token keys one layer defines on its own, if it defines any.
fn token_keys_of(
    layer: &Layer,
) -> Result<Option<BTreeMap<String, SecretString>>, config::ConfigError> {
    let alone = Config::builder().add_source(vec![layer.clone()]).build()?;
    match alone.get::<BTreeMap<String, String>>("tokens.keys") {
        Ok(keys) => Ok(Some(
            keys.into_iter()
                .map(|(id, key)| (id, SecretString::from(key)))
                .collect(),
        )),
        Err(config::ConfigError::NotFound(_)) => Ok(None),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: &str = include_str!("../../../config/default.toml");
    const LOCAL: &str = include_str!("../../../config/local.toml");

    /// A secret of the right length that this repository does not ship.
    const OWN_SECRET: &str = "an-operators-own-secret-0123456789";

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn local(pairs: &[(&str, &str)]) -> Result<Settings, config::ConfigError> {
        let mut env = env(pairs);
        env.insert("SECKILL_ENV".to_owned(), LOCAL_ENV.to_owned());
        Settings::from_sources(&[DEFAULT, LOCAL], env)
    }

    /// A deployment: the image's default.toml and its own secrets in the environment.
    fn deployed(pairs: &[(&str, &str)]) -> Result<Settings, config::ConfigError> {
        let mut all = env(&[
            ("SECKILL_ADMIN__TOKEN", OWN_SECRET),
            ("SECKILL_TOKENS__KEYS__K1", OWN_SECRET),
            ("SECKILL_PAYMENTS__WEBHOOK_SECRET", OWN_SECRET),
        ]);
        all.extend(env(pairs));
        Settings::from_sources(&[DEFAULT], all)
    }

    fn refusal(result: Result<Settings, config::ConfigError>) -> String {
        result.expect_err("the settings were accepted").to_string()
    }

    #[test]
    fn a_misspelt_setting_variable_is_refused_with_the_one_meant() {
        let message = refusal(local(&[("SECKILL_GATEWAY__KEEP_ALIVE_SEC", "5")]));
        assert!(
            message.contains("unknown setting `gateway.keep_alive_sec`")
                && message.contains("SECKILL_GATEWAY__KEEP_ALIVE_SECS"),
            "{message}"
        );
        let message = refusal(local(&[("SECKILL_GATEWAY_KEEP_ALIVE_SECS", "5")]));
        assert!(
            message.contains("SECKILL_GATEWAY__KEEP_ALIVE_SECS"),
            "{message}"
        );
    }

    #[test]
    fn a_misspelt_key_in_a_file_is_refused() {
        let env = env(&[("SECKILL_ENV", LOCAL_ENV)]);
        let message = refusal(Settings::from_sources(
            &[DEFAULT, LOCAL, "[orders]\npayment_window = 60\n"],
            env,
        ));
        assert!(
            message.contains("unknown setting `orders.payment_window` (set in a config file)")
                && message.contains("`orders.payment_window_secs`"),
            "{message}"
        );
    }

    #[test]
    fn a_rocketmq_access_key_without_its_secret_is_refused() {
        let message = refusal(local(&[("SECKILL_ROCKETMQ__ACCESS_KEY", "seckill")]));
        assert!(
            message.contains("rocketmq.access_key is set but rocketmq.secret_key is not"),
            "{message}"
        );
        let both = local(&[
            ("SECKILL_ROCKETMQ__ACCESS_KEY", "seckill"),
            ("SECKILL_ROCKETMQ__SECRET_KEY", "its-secret"),
        ]);
        assert!(both.is_ok(), "{:?}", both.err());
    }

    #[test]
    fn the_loaders_own_variables_are_not_settings() {
        let settings = local(&[
            ("SECKILL_CONFIG_DIR", "config"),
            ("SECKILL_RUN_DIR", ".run"),
        ]);
        assert!(settings.is_ok(), "{:?}", settings.err());
    }

    #[test]
    fn the_shipped_defaults_parse_in_local_mode() {
        let settings = local(&[]).unwrap();
        assert_eq!(settings.gateway.listen, "127.0.0.1:8080");
        assert_eq!(settings.auth.mode, AuthMode::Header);
        assert_eq!(settings.admin.token.expose_secret(), "dev-admin-token");
        assert_eq!(settings.auth.jwt_issuer, "");
        assert_eq!(settings.auth.jwt_audience, "");
    }

    #[test]
    fn environment_variables_override_the_file() {
        let settings = local(&[
            ("SECKILL_REDIS__URL", "redis://elsewhere:1"),
            ("SECKILL_CONSUMER__BATCH_SIZE", "7"),
            ("SECKILL_AUTH__MODE", "jwt"),
            ("SECKILL_AUTH__JWT_ISSUER", "https://id.example"),
        ])
        .unwrap();
        assert_eq!(settings.redis.url, "redis://elsewhere:1");
        assert_eq!(settings.consumer.batch_size, 7);
        assert_eq!(settings.auth.mode, AuthMode::Jwt);
        assert_eq!(settings.auth.jwt_issuer, "https://id.example");
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let settings = local(&[]).unwrap();
        let debug = format!("{settings:?}");
        assert!(!debug.contains("dev-admin-token"));
        assert!(!debug.contains("dev-token-key-change-me"));
        assert!(!debug.contains("seckill:seckill@"));
    }

    #[test]
    fn a_bad_value_is_an_error_not_a_default() {
        assert!(local(&[("SECKILL_AUTH__MODE", "magic")]).is_err());
    }

    #[test]
    fn a_deployment_with_its_own_secrets_starts() {
        let settings = deployed(&[]).unwrap();
        assert_eq!(settings.admin.token.expose_secret(), OWN_SECRET);
        assert_eq!(
            settings.tokens.keys.keys().collect::<Vec<_>>(),
            vec!["k1"],
            "the key the environment set, nothing else"
        );
    }

    #[test]
    fn a_key_dropped_from_the_environment_is_gone_though_a_file_defines_it() {
        // The rotation: the Secret now holds k2 alone; local.toml (a lower layer) still has
        // k1, the public development key, which must not verify anything any more.
        let settings = local(&[
            ("SECKILL_TOKENS__KEYS__K2", OWN_SECRET),
            ("SECKILL_TOKENS__CURRENT_KEY_ID", "k2"),
        ])
        .unwrap();
        assert_eq!(settings.tokens.keys.keys().collect::<Vec<_>>(), vec!["k2"]);
    }

    #[test]
    fn the_files_keys_hold_while_the_environment_defines_none() {
        let settings = local(&[]).unwrap();
        assert_eq!(settings.tokens.keys.keys().collect::<Vec<_>>(), vec!["k1"]);
    }

    #[test]
    fn of_two_files_the_higher_ones_keys_replace_the_lower_ones() {
        let upper = "[tokens]\nkeys = { k2 = \"another-local-key-of-16\" }\n";
        let settings = Settings::from_sources(
            &[DEFAULT, LOCAL, upper],
            env(&[
                ("SECKILL_ENV", LOCAL_ENV),
                ("SECKILL_TOKENS__CURRENT_KEY_ID", "k2"),
            ]),
        )
        .unwrap();
        assert_eq!(settings.tokens.keys.keys().collect::<Vec<_>>(), vec!["k2"]);
    }

    #[test]
    fn a_current_key_that_no_layer_defines_is_refused_in_every_mode() {
        let message = refusal(local(&[("SECKILL_TOKENS__CURRENT_KEY_ID", "k9")]));
        assert!(message.contains("tokens.current_key_id"), "{message}");
        let message = refusal(deployed(&[("SECKILL_TOKENS__CURRENT_KEY_ID", "k9")]));
        assert!(message.contains("SECKILL_TOKENS__KEYS__K9"), "{message}");
    }

    #[test]
    fn outside_local_mode_the_development_secrets_are_refused() {
        // local.toml's secrets, read without SECKILL_ENV=local: what an image that carried
        // the file, or a Secret filled in from it, would run on.
        let message = refusal(Settings::from_sources(&[DEFAULT, LOCAL], BTreeMap::new()));
        assert!(
            message.contains("admin.token (SECKILL_ADMIN__TOKEN)"),
            "{message}"
        );
        assert!(message.contains("development value"), "{message}");

        let message = refusal(deployed(&[(
            "SECKILL_TOKENS__KEYS__K1",
            "dev-token-key-change-me",
        )]));
        assert!(message.contains("tokens.keys.k1"), "{message}");

        let message = refusal(deployed(&[(
            "SECKILL_PAYMENTS__WEBHOOK_SECRET",
            "dev-webhook-secret-change-me",
        )]));
        assert!(message.contains("payments.webhook_secret"), "{message}");
    }

    #[test]
    fn outside_local_mode_a_missing_secret_is_refused_not_defaulted() {
        let message = refusal(Settings::from_sources(
            &[DEFAULT],
            env(&[("SECKILL_TOKENS__KEYS__K1", OWN_SECRET)]),
        ));
        assert!(message.contains("admin.token"), "{message}");
        assert!(message.contains("is not set"), "{message}");

        let message = refusal(Settings::from_sources(
            &[DEFAULT],
            env(&[("SECKILL_ADMIN__TOKEN", OWN_SECRET)]),
        ));
        assert!(message.contains("tokens.current_key_id"), "{message}");
    }

    #[test]
    fn outside_local_mode_a_secret_under_32_bytes_is_refused() {
        let short = "x".repeat(MIN_SECRET_BYTES - 1);
        let message = refusal(deployed(&[("SECKILL_ADMIN__TOKEN", &short)]));
        assert!(message.contains("shorter than 32 bytes"), "{message}");
        let exact = "x".repeat(MIN_SECRET_BYTES);
        assert!(deployed(&[("SECKILL_ADMIN__TOKEN", &exact)]).is_ok());
    }

    #[test]
    fn the_jwt_secret_is_required_in_jwt_mode_only() {
        assert!(deployed(&[]).is_ok(), "header mode verifies no JWT");
        let message = refusal(deployed(&[("SECKILL_AUTH__MODE", "jwt")]));
        assert!(message.contains("auth.jwt_secret"), "{message}");
        assert!(
            deployed(&[
                ("SECKILL_AUTH__MODE", "jwt"),
                ("SECKILL_AUTH__JWT_SECRET", OWN_SECRET)
            ])
            .is_ok()
        );
    }

    #[test]
    fn every_secret_of_local_toml_is_known_as_a_development_value() {
        let settings = local(&[]).unwrap();
        for secret in [
            &settings.admin.token,
            &settings.auth.jwt_secret,
            &settings.tokens.keys["k1"],
        ] {
            assert!(SHIPPED_SECRETS.contains(&secret.expose_secret()));
        }
    }
}
