//! Typed settings. Every service reads the same file set — one ConfigMap serves the whole
//! deployment — into a settings type of its own ([`ServiceSettings`]): the sections it reads,
//! of which the shared ones are here, the connection sections in the adapters that connect
//! (`[redis]` in stock-cache, `[mysql]` in order-store, `[rocketmq]` in order-queue), and its
//! own sections in its crate. A section the
//! service does not read is another service's business, and left alone; a key no section
//! has, or a misspelt one in a section the service reads, stops it (see
//! [`unknown_keys`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use config::{Config, Environment, File, FileFormat};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde::de::DeserializeOwned;

mod unknown_keys;

pub use unknown_keys::variable_of_key;

/// What a service's settings type tells the loader beyond its sections.
pub trait ServiceSettings: DeserializeOwned {
    /// Logging and tracing, which every service sets up before anything else.
    fn telemetry(&self) -> &TelemetrySettings;

    /// The secrets this service relies on, by key (`admin.token`): outside local mode each
    /// must be set, long enough, and none this repository ships.
    fn secrets(&self) -> Vec<(String, &SecretString)>;

    /// Checks across settings that no single value's type can make, as an error naming
    /// the settings and their variables.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }

    /// The purchase-token keys, for a service that has them: the loader takes them from one
    /// layer alone (see [`load`]).
    fn token_keys_mut(&mut self) -> Option<&mut BTreeMap<String, SecretString>> {
        None
    }
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
    /// From one configuration layer only: see [`load`].
    #[serde(default)]
    pub keys: BTreeMap<String, SecretString>,
}

impl TokenSettings {
    /// Each key as a secret, by its setting (`tokens.keys.k1`).
    pub fn secrets(&self) -> impl Iterator<Item = (String, &SecretString)> {
        self.keys
            .iter()
            .map(|(id, key)| (format!("tokens.keys.{id}"), key))
    }

    /// The current key must be one of the keys, in every mode.
    pub fn check(&self) -> Result<(), String> {
        if self.keys.contains_key(&self.current_key_id) {
            return Ok(());
        }
        Err(format!(
            "tokens.current_key_id is `{}`, but tokens.keys has no such key (set {})",
            self.current_key_id,
            variable_of_key(&format!("tokens.keys.{}", self.current_key_id))
        ))
    }
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

/// An unset secret: empty, which outside local mode is refused.
pub fn unset_secret() -> SecretString {
    SecretString::from("")
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

/// Reads `$SECKILL_CONFIG_DIR` (default `config/`): `default.toml`, then
/// `<SECKILL_ENV>.toml` when that variable is set, then `SECKILL_*` variables.
///
/// `tokens.keys` comes from the highest of those layers that defines any key, alone: maps
/// would otherwise merge across layers, and a key dropped from the environment (a rotation)
/// would live on from a file. Outside local mode (`SECKILL_ENV=local`) every secret the
/// service relies on must be set, at least [`MIN_SECRET_BYTES`] long and none this
/// repository ships; otherwise this is an error naming the setting.
pub fn load<S: ServiceSettings>() -> Result<S, config::ConfigError> {
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
    from_layers(layers, vars, env.as_deref() == Some(LOCAL_ENV))
}

/// The same rules from strings, so tests need neither files nor the process environment:
/// `files` (TOML, lowest first; the first plays `default.toml`), then `env`, in local mode
/// when `env` says `SECKILL_ENV=local`.
pub fn from_sources<S: ServiceSettings>(
    files: &[&str],
    env: BTreeMap<String, String>,
) -> Result<S, config::ConfigError> {
    let local = env.get("SECKILL_ENV").map(String::as_str) == Some(LOCAL_ENV);
    let layers: Vec<Layer> = files
        .iter()
        .map(|toml| Box::new(File::from_str(toml, FileFormat::Toml)) as Layer)
        .collect();
    from_layers(layers, env, local)
}

/// `layers`, then the setting variables among `vars` (every `SECKILL_` variable), merged and
/// read. A section of the first layer (the shipped `default.toml`) that the service does not
/// read is another service's; any other key that no setting has, from either, is an error
/// naming it.
fn from_layers<S: ServiceSettings>(
    mut layers: Vec<Layer>,
    vars: BTreeMap<String, String>,
    local: bool,
) -> Result<S, config::ConfigError> {
    let deployment_sections = match layers.first() {
        Some(first) => sections_of(first)?,
        None => Vec::new(),
    };
    layers.push(Box::new(environment(unknown_keys::setting_variables(
        &vars,
    ))));
    let mut keys = None;
    let mut builder = Config::builder();
    for layer in layers {
        if let Some(layer_keys) = token_keys_of(&layer)? {
            keys = Some(layer_keys);
        }
        builder = builder.add_source(vec![layer]);
    }
    let merged = builder.build()?.cache;
    let mut ignored = Vec::new();
    let mut settings: S = serde_ignored::deserialize(merged.clone(), |path| {
        ignored.push(path.to_string());
    })?;
    let known: Vec<String> = unknown_keys::leaf_keys(&merged)
        .into_iter()
        .filter(|key| !ignored.contains(key))
        .collect();
    ignored.retain(|path| !deployment_sections.contains(path));
    if let Some(problem) = unknown_keys::first_problem(&ignored, &known, &vars) {
        return Err(config::ConfigError::Message(problem));
    }
    if let (Some(keys), Some(read)) = (keys, settings.token_keys_mut()) {
        *read = keys;
    }
    settings.check().map_err(config::ConfigError::Message)?;
    if !local {
        check_secrets(&settings).map_err(config::ConfigError::Message)?;
    }
    Ok(settings)
}

fn environment(variables: BTreeMap<String, String>) -> Environment {
    Environment::with_prefix("SECKILL")
        .prefix_separator("_")
        .separator(unknown_keys::SEPARATOR)
        .try_parsing(true)
        .source(Some(variables.into_iter().collect()))
}

/// Outside local mode, every secret the service relies on is a random value of the
/// operator's own.
fn check_secrets(settings: &impl ServiceSettings) -> Result<(), String> {
    for (setting, secret) in settings.secrets() {
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
            "{setting} ({}) {problem}: outside local mode (SECKILL_ENV={LOCAL_ENV}) every \
             secret must be a random value of your own, at least {MIN_SECRET_BYTES} bytes long",
            variable_of_key(&setting)
        ));
    }
    Ok(())
}

/// One layer of configuration: a file or the environment.
type Layer = Box<dyn config::Source + Send + Sync>;

/// The sections (top-level tables) one layer defines.
fn sections_of(layer: &Layer) -> Result<Vec<String>, config::ConfigError> {
    let alone = Config::builder().add_source(vec![layer.clone()]).build()?;
    Ok(alone
        .cache
        .into_table()
        .map(|table| table.into_keys().collect())
        .unwrap_or_default())
}

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
    use order_store::MysqlSettings;
    use stock_cache::RedisSettings;

    use super::*;

    const DEFAULT: &str = include_str!("../../../config/default.toml");
    const LOCAL: &str = include_str!("../../../config/local.toml");

    /// A secret of the right length that this repository does not ship.
    const OWN_SECRET: &str = "an-operators-own-secret-0123456789";

    /// A service that reads only shared sections and relies on the admin token and the
    /// token keys: the gateway's and the consumer's own sections are not its business.
    #[derive(Debug, Deserialize)]
    struct Issuer {
        redis: RedisSettings,
        mysql: MysqlSettings,
        #[serde(default)]
        admin: AdminSettings,
        tokens: TokenSettings,
        telemetry: TelemetrySettings,
        #[serde(default)]
        orders: OrderSettings,
    }

    impl ServiceSettings for Issuer {
        fn telemetry(&self) -> &TelemetrySettings {
            &self.telemetry
        }
        fn secrets(&self) -> Vec<(String, &SecretString)> {
            let mut secrets = vec![("admin.token".to_owned(), &self.admin.token)];
            secrets.extend(self.tokens.secrets());
            secrets
        }
        fn check(&self) -> Result<(), String> {
            self.tokens.check()
        }
        fn token_keys_mut(&mut self) -> Option<&mut BTreeMap<String, SecretString>> {
            Some(&mut self.tokens.keys)
        }
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn local(pairs: &[(&str, &str)]) -> Result<Issuer, config::ConfigError> {
        let mut env = env(pairs);
        env.insert("SECKILL_ENV".to_owned(), LOCAL_ENV.to_owned());
        from_sources(&[DEFAULT, LOCAL], env)
    }

    /// A deployment: the image's default.toml and its own secrets in the environment.
    fn deployed(pairs: &[(&str, &str)]) -> Result<Issuer, config::ConfigError> {
        let mut all = env(&[
            ("SECKILL_ADMIN__TOKEN", OWN_SECRET),
            ("SECKILL_TOKENS__KEYS__K1", OWN_SECRET),
        ]);
        all.extend(env(pairs));
        from_sources(&[DEFAULT], all)
    }

    fn refusal(result: Result<Issuer, config::ConfigError>) -> String {
        result.expect_err("the settings were accepted").to_string()
    }

    #[test]
    fn a_misspelt_setting_variable_is_refused_with_the_one_meant() {
        let message = refusal(local(&[("SECKILL_REDIS__POOL_SIZ", "5")]));
        assert!(
            message.contains("unknown setting `redis.pool_siz`")
                && message.contains("SECKILL_REDIS__POOL_SIZE"),
            "{message}"
        );
        let message = refusal(local(&[("SECKILL_REDIS_POOL_SIZE", "5")]));
        assert!(message.contains("SECKILL_REDIS__POOL_SIZE"), "{message}");
    }

    #[test]
    fn a_misspelt_key_in_a_file_is_refused() {
        let env = env(&[("SECKILL_ENV", LOCAL_ENV)]);
        let message = refusal(from_sources(
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
    fn another_services_section_is_left_to_that_service() {
        let settings = local(&[
            ("SECKILL_CONSUMER__BATCH_SIZE", "7"),
            ("SECKILL_GATEWAY__LISTEN", "0.0.0.0:8080"),
        ]);
        assert!(settings.is_ok(), "{:?}", settings.err());
    }

    #[test]
    fn redis_nodes_are_a_list_in_a_file_and_comma_separated_in_a_variable() {
        let from_file = from_sources::<Issuer>(
            &[
                DEFAULT,
                LOCAL,
                "[redis]\nmode = \"cluster\"\nnodes = [\"redis://a:1\", \"redis://b:2\"]\n",
            ],
            env(&[("SECKILL_ENV", LOCAL_ENV)]),
        )
        .unwrap();
        let from_variable = local(&[
            ("SECKILL_REDIS__MODE", "sentinel"),
            ("SECKILL_REDIS__NODES", "redis://a:1, redis://b:2"),
            ("SECKILL_REDIS__MASTER_NAME", "seckill"),
        ])
        .unwrap();
        for redis in [from_file.redis, from_variable.redis] {
            assert_eq!(redis.nodes, ["redis://a:1", "redis://b:2"]);
            assert_eq!(redis.check(), Ok(()));
        }
    }

    #[test]
    fn a_section_no_service_has_is_refused() {
        let message = refusal(local(&[("SECKILL_CONSUMR__BATCH_SIZE", "7")]));
        assert!(
            message.contains("unknown setting `consumr`")
                || message.contains("unknown setting `consumr.batch_size`"),
            "{message}"
        );
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
    fn environment_variables_override_the_file() {
        let settings = local(&[
            ("SECKILL_REDIS__URL", "redis://elsewhere:1"),
            ("SECKILL_ORDERS__PAYMENT_WINDOW_SECS", "60"),
        ])
        .unwrap();
        assert_eq!(settings.redis.url, "redis://elsewhere:1");
        assert_eq!(settings.orders.payment_window_secs, 60);
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let settings = local(&[]).unwrap();
        let debug = format!("{settings:?}");
        assert!(!debug.contains("dev-admin-token"));
        assert!(!debug.contains("dev-token-key-change-me"));
        assert!(!debug.contains("seckill:seckill@"));
        assert!(settings.mysql.pool_size > 0, "the section is read");
    }

    #[test]
    fn a_bad_value_is_an_error_not_a_default() {
        assert!(local(&[("SECKILL_REDIS__POOL_SIZE", "many")]).is_err());
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
        let settings: Issuer = from_sources(
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
        let message = refusal(from_sources(&[DEFAULT, LOCAL], BTreeMap::new()));
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
    }

    #[test]
    fn outside_local_mode_a_missing_secret_is_refused_not_defaulted() {
        let message = refusal(from_sources(
            &[DEFAULT],
            env(&[("SECKILL_TOKENS__KEYS__K1", OWN_SECRET)]),
        ));
        assert!(message.contains("admin.token"), "{message}");
        assert!(message.contains("is not set"), "{message}");

        let message = refusal(from_sources(
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
    fn a_secret_the_service_does_not_rely_on_is_not_asked_for() {
        // The webhook secret is the gateway's: a service without it starts without it.
        let settings = deployed(&[]);
        assert!(settings.is_ok(), "{:?}", settings.err());
    }
}
