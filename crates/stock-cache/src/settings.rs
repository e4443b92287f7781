//! The `[redis]` section of a service's settings, and the connection it describes.
//!
//! A `redis://` URL is plain TCP. A `rediss://` URL is TLS: the server's certificate is
//! checked against `tls_ca_file` (a managed Redis's own CA) or, unset, the system's roots,
//! and `tls_cert_file` / `tls_key_file` are presented to a server that asks for a client
//! certificate. redis-rs's `rediss://…/#insecure` skips the check; it is for a laptop, never
//! for a sale.

use std::path::{Path, PathBuf};
use std::time::Duration;

use deadpool_redis::redis::{
    self, ClientTlsConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, TlsCertificates,
};
use serde::Deserialize;

use crate::{CacheError, StockCache};

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
    /// PEM file of the CAs that sign the server's certificate (`rediss://` only); unset: the
    /// system's roots.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// PEM client certificate, for a server that asks for one; with `tls_key_file`.
    #[serde(default)]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `tls_cert_file`.
    #[serde(default)]
    pub tls_key_file: Option<PathBuf>,
}

impl RedisSettings {
    /// What the settings cannot mean: TLS files beside a plain URL (they would be ignored,
    /// and the connection would go out unencrypted), or half a client certificate.
    pub fn check(&self) -> Result<(), String> {
        let tls_files = [&self.tls_ca_file, &self.tls_cert_file, &self.tls_key_file];
        if !self.url.starts_with("rediss://") && tls_files.iter().any(|file| file.is_some()) {
            return Err(
                "redis.tls_ca_file, tls_cert_file and tls_key_file are for a rediss:// URL; \
                 redis.url is not one, and would connect without TLS"
                    .into(),
            );
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            return Err("redis.tls_cert_file and redis.tls_key_file go together".into());
        }
        Ok(())
    }

    /// The server, and for `rediss://` the certificates read from their files.
    pub fn connection_info(&self) -> Result<ConnectionInfo, CacheError> {
        let info = self.url.as_str().into_connection_info().map_err(bad_url)?;
        if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
            return Ok(info);
        }
        let client_tls = match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: read_pem(cert)?,
                client_key: read_pem(key)?,
            }),
            _ => None,
        };
        let root_cert = self.tls_ca_file.as_deref().map(read_pem).transpose()?;
        let certificates = TlsCertificates {
            client_tls,
            root_cert,
        };
        redis::Client::build_with_tls(info, certificates)
            .map(|client| client.get_connection_info().clone())
            .map_err(bad_url)
    }

    /// A handle on this Redis, opening at most `pool_size` connections at once.
    pub fn open(&self, pool_size: usize) -> Result<StockCache, CacheError> {
        StockCache::on(
            self.connection_info()?,
            pool_size,
            &self.key_prefix,
            Duration::from_millis(self.timeout_ms),
        )
    }
}

fn read_pem(path: &Path) -> Result<Vec<u8>, CacheError> {
    std::fs::read(path)
        .map_err(|e| CacheError::Pool(format!("cannot read {}: {e}", path.display())))
}

fn bad_url(error: redis::RedisError) -> CacheError {
    CacheError::Pool(format!("redis.url: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str) -> RedisSettings {
        RedisSettings {
            url: url.to_owned(),
            key_prefix: "sk".into(),
            pool_size: 1,
            timeout_ms: 100,
            wait_replicas: 0,
            wait_timeout_ms: 0,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }

    #[test]
    fn tls_files_beside_a_plain_url_are_refused() {
        let plain = RedisSettings {
            tls_ca_file: Some("ca.pem".into()),
            ..settings("redis://127.0.0.1:6379")
        };
        assert!(plain.check().unwrap_err().contains("rediss://"));
    }

    #[test]
    fn half_a_client_certificate_is_refused() {
        let half = RedisSettings {
            tls_cert_file: Some("client.pem".into()),
            ..settings("rediss://127.0.0.1:6380")
        };
        assert!(half.check().unwrap_err().contains("go together"));
    }

    #[test]
    fn a_plain_url_or_a_rediss_url_with_no_files_is_fine() {
        assert_eq!(settings("redis://127.0.0.1:6379").check(), Ok(()));
        assert_eq!(settings("rediss://127.0.0.1:6380").check(), Ok(()));
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let missing = RedisSettings {
            tls_ca_file: Some("/nonexistent/ca.pem".into()),
            ..settings("rediss://127.0.0.1:6380")
        };
        let error = missing.connection_info().unwrap_err().to_string();
        assert!(error.contains("/nonexistent/ca.pem"), "{error}");
    }
}
