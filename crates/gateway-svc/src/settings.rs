//! The gateway's settings: its own sections, and the shared ones it reads.

use std::collections::BTreeMap;

use order_queue::MqSettings;
use order_store::MysqlSettings;
use platform::ServiceSettings;
use platform::settings::{
    AdminSettings, OrderSettings, TelemetrySettings, TokenSettings, unset_secret,
};
use secrecy::SecretString;
use serde::Deserialize;
use stock_cache::RedisSettings;

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub gateway: GatewaySettings,
    pub redis: RedisSettings,
    /// Product definitions and the payment callbacks' writes.
    pub mysql: MysqlSettings,
    pub rocketmq: MqSettings,
    pub auth: AuthSettings,
    /// Only a secret: a file may well have no `[admin]` table at all.
    #[serde(default)]
    pub admin: AdminSettings,
    pub tokens: TokenSettings,
    pub rate_limit: RateLimitSettings,
    pub telemetry: TelemetrySettings,
    /// After the purchase: how buyers watch their orders.
    #[serde(default)]
    pub orders: OrderSettings,
    /// Only a secret, like `[admin]`.
    #[serde(default)]
    pub payments: PaymentSettings,
}

impl ServiceSettings for Settings {
    fn telemetry(&self) -> &TelemetrySettings {
        &self.telemetry
    }

    fn secrets(&self) -> Vec<(String, &SecretString)> {
        let mut secrets = vec![
            ("admin.token".to_owned(), &self.admin.token),
            (
                "payments.webhook_secret".to_owned(),
                &self.payments.webhook_secret,
            ),
        ];
        // In header mode no JWT is ever verified, so its secret guards nothing.
        if self.auth.mode == AuthMode::Jwt {
            secrets.push(("auth.jwt_secret".to_owned(), &self.auth.jwt_secret));
        }
        secrets.extend(self.tokens.secrets());
        secrets
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

#[derive(Debug, Clone, Deserialize)]
pub struct GatewaySettings {
    pub listen: String,
    /// Where `/metrics` and `/admin` are served instead of `listen`; unset: on `listen`
    /// too, with the rest of the API.
    #[serde(default)]
    pub ops_listen: Option<String>,
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
    /// How long a product's sale window, as issuing a token reads it, is kept (0: read for
    /// every token).
    pub sale_window_cache_ms: u64,
    /// HTTP worker threads (0: one per core the process may use).
    pub workers: usize,
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
    /// Required in jwt mode outside local runs (see [`Settings::secrets`]); unset is empty.
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

#[derive(Debug, Clone, Deserialize)]
pub struct RateLimitSettings {
    pub global_per_sec: u32,
    pub user_per_sec: u32,
    pub user_burst: u32,
    /// Most purchases one instance takes to Redis and the broker at once; past it a
    /// purchase is refused at once (429) rather than queued.
    pub purchases_in_flight: u32,
}

#[cfg(test)]
mod tests {
    use platform::settings::{LOCAL_ENV, from_sources};
    use secrecy::ExposeSecret;

    use super::*;

    const DEFAULT: &str = include_str!("../../../config/default.toml");
    const LOCAL: &str = include_str!("../../../config/local.toml");

    /// A secret of the right length that this repository does not ship.
    const OWN_SECRET: &str = "an-operators-own-secret-0123456789";

    /// `config/` as shipped with `vars` on top: in local mode, or as a deployment that set
    /// its own secrets.
    fn load(local: bool, vars: &[(&str, &str)]) -> Result<Settings, String> {
        let mode = local.then_some(("SECKILL_ENV", LOCAL_ENV));
        let mut env: BTreeMap<String, String> = mode
            .into_iter()
            .chain([
                ("SECKILL_ADMIN__TOKEN", OWN_SECRET),
                ("SECKILL_TOKENS__KEYS__K1", OWN_SECRET),
                ("SECKILL_PAYMENTS__WEBHOOK_SECRET", OWN_SECRET),
            ])
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        env.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let files: &[&str] = if local { &[DEFAULT, LOCAL] } else { &[DEFAULT] };
        from_sources(files, env).map_err(|error| error.to_string())
    }

    #[test]
    fn the_shipped_defaults_parse_in_local_mode() {
        let settings = load(true, &[]).unwrap();
        assert_eq!(settings.gateway.listen, "127.0.0.1:8080");
        assert_eq!(settings.auth.mode, AuthMode::Header);
        assert_eq!(settings.auth.jwt_issuer, "");
        assert_eq!(settings.auth.jwt_audience, "");
    }

    #[test]
    fn the_auth_mode_and_issuer_come_from_the_environment() {
        let settings = load(
            true,
            &[
                ("SECKILL_AUTH__MODE", "jwt"),
                ("SECKILL_AUTH__JWT_ISSUER", "https://id.example"),
            ],
        )
        .unwrap();
        assert_eq!(settings.auth.mode, AuthMode::Jwt);
        assert_eq!(settings.auth.jwt_issuer, "https://id.example");
        assert!(load(true, &[("SECKILL_AUTH__MODE", "magic")]).is_err());
    }

    #[test]
    fn a_rocketmq_access_key_without_its_secret_is_refused() {
        let message = load(true, &[("SECKILL_ROCKETMQ__ACCESS_KEY", "seckill")]).unwrap_err();
        assert!(
            message.contains("rocketmq.access_key is set but rocketmq.secret_key is not"),
            "{message}"
        );
        let both = load(
            true,
            &[
                ("SECKILL_ROCKETMQ__ACCESS_KEY", "seckill"),
                ("SECKILL_ROCKETMQ__SECRET_KEY", "its-secret"),
            ],
        );
        assert!(both.is_ok(), "{:?}", both.err());
    }

    #[test]
    fn the_jwt_secret_is_required_in_jwt_mode_only() {
        assert!(load(false, &[]).is_ok(), "header mode verifies no JWT");
        let message = load(false, &[("SECKILL_AUTH__MODE", "jwt")]).unwrap_err();
        assert!(message.contains("auth.jwt_secret"), "{message}");
        let jwt = load(
            false,
            &[
                ("SECKILL_AUTH__MODE", "jwt"),
                ("SECKILL_AUTH__JWT_SECRET", OWN_SECRET),
            ],
        );
        assert!(jwt.is_ok(), "{:?}", jwt.err());
    }

    #[test]
    fn every_secret_of_local_toml_is_refused_outside_local_mode() {
        // local.toml's own values, not the ones `load` sets on top of it.
        let local_only: Settings = from_sources(
            &[DEFAULT, LOCAL],
            [("SECKILL_ENV", LOCAL_ENV), ("SECKILL_AUTH__MODE", "jwt")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
        .unwrap();
        assert_eq!(
            local_only.secrets().len(),
            4,
            "admin, webhook, JWT, token key"
        );
        for (setting, value) in local_only.secrets() {
            let variable = platform::settings::variable_of_key(&setting);
            let message = load(
                false,
                &[
                    ("SECKILL_AUTH__MODE", "jwt"),
                    ("SECKILL_AUTH__JWT_SECRET", OWN_SECRET),
                    (&variable, value.expose_secret()),
                ],
            )
            .unwrap_err();
            assert!(
                message.contains(&setting) && message.contains("development value"),
                "{setting}: {message}"
            );
        }
    }
}
