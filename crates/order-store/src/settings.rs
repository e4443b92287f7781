//! The `[mysql]` section of a service's settings, and how it reaches the server.
//!
//! `ssl_mode` follows the MySQL client's `--ssl-mode`, without `PREFERRED`: a connection
//! that quietly falls back to plain text when TLS fails is not one a managed database's
//! operator asked for.
//!
//! | `ssl_mode` | encrypted | server certificate checked against the CA | host name checked |
//! |---|---|---|---|
//! | `disabled` (default) | no | | |
//! | `required` | yes | no | no |
//! | `verify_ca` | yes | yes | no |
//! | `verify_identity` | yes | yes | yes |
//!
//! The CA is `ssl_ca_file`'s, or unset the system's roots; `ssl_cert_file` and
//! `ssl_key_file` are presented to a server whose user requires a client certificate.

use std::path::{Path, PathBuf};

use diesel::result::{ConnectionError, ConnectionResult};
use diesel_async::{AsyncConnection, AsyncMysqlConnection};
use mysql_async::{ClientIdentity, Opts, OptsBuilder, SslOpts};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use crate::error::{Result, StoreError};

#[derive(Debug, Clone, Deserialize)]
pub struct MysqlSettings {
    /// Holds the password, so it is kept out of Debug output.
    pub url: SecretString,
    pub pool_size: usize,
    #[serde(default)]
    pub ssl_mode: SslMode,
    /// PEM file of the CAs that sign the server's certificate; unset: the system's roots.
    #[serde(default)]
    pub ssl_ca_file: Option<PathBuf>,
    /// PEM client certificate, for a user that requires one (`REQUIRE X509`); with
    /// `ssl_key_file`.
    #[serde(default)]
    pub ssl_cert_file: Option<PathBuf>,
    /// PEM private key of `ssl_cert_file`.
    #[serde(default)]
    pub ssl_key_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SslMode {
    #[default]
    Disabled,
    Required,
    VerifyCa,
    VerifyIdentity,
}

impl MysqlSettings {
    /// What the settings cannot mean: certificate files with TLS off (they would be ignored,
    /// and the connection would go out unencrypted), or half a client certificate.
    pub fn check(&self) -> std::result::Result<(), String> {
        let files = [&self.ssl_ca_file, &self.ssl_cert_file, &self.ssl_key_file];
        if self.ssl_mode == SslMode::Disabled && files.iter().any(|file| file.is_some()) {
            return Err(
                "mysql.ssl_ca_file, ssl_cert_file and ssl_key_file need mysql.ssl_mode \
                 (required, verify_ca or verify_identity); it is disabled, and the \
                 connection would go out without TLS"
                    .into(),
            );
        }
        if self.ssl_cert_file.is_some() != self.ssl_key_file.is_some() {
            return Err("mysql.ssl_cert_file and mysql.ssl_key_file go together".into());
        }
        Ok(())
    }

    /// The server and the TLS around it, the certificate files read now: a missing file
    /// stops the service at start-up rather than at its first connection.
    pub fn endpoint(&self) -> Result<Endpoint> {
        let url = self.url.expose_secret();
        if self.ssl_mode == SslMode::Disabled {
            return Ok(Endpoint::plain(url));
        }
        let verify = matches!(self.ssl_mode, SslMode::VerifyCa | SslMode::VerifyIdentity);
        let mut ssl = SslOpts::default()
            .with_danger_accept_invalid_certs(!verify)
            .with_danger_skip_domain_validation(self.ssl_mode != SslMode::VerifyIdentity);
        if let Some(ca) = &self.ssl_ca_file {
            ssl = ssl
                .with_root_certs(vec![read_pem(ca)?.into()])
                .with_disable_built_in_roots(true);
        }
        if let (Some(cert), Some(key)) = (&self.ssl_cert_file, &self.ssl_key_file) {
            let key_pem = read_pem(key)?;
            if !key_pem.starts_with(b"-----BEGIN RSA PRIVATE KEY-----") {
                return Err(StoreError::InvalidUrl(format!(
                    "mysql.ssl_key_file {}: the MySQL driver reads an RSA key in PKCS#1 PEM \
                     only (-----BEGIN RSA PRIVATE KEY-----); convert it with \
                     `openssl rsa -in KEY -traditional -out KEY.rsa`",
                    key.display()
                )));
            }
            ssl = ssl.with_client_identity(Some(ClientIdentity::new(
                read_pem(cert)?.into(),
                key_pem.into(),
            )));
        }
        Ok(Endpoint {
            url: url.into(),
            ssl: Some(ssl),
        })
    }
}

fn read_pem(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| StoreError::InvalidUrl(format!("cannot read {}: {e}", path.display())))
}

/// Where connections go: the URL (it carries the password, so this is never printed), and
/// the TLS to open them with, if any.
#[derive(Clone)]
pub struct Endpoint {
    url: String,
    ssl: Option<SslOpts>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("tls", &self.ssl.is_some())
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// `mysql://user:password@host:port/database`, without TLS unless the URL's own
    /// parameters ask for it.
    pub fn plain(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            ssl: None,
        }
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// One connection. Without TLS, diesel-async's own way; with it, the same options
    /// diesel-async sets (its statement cache instead of the driver's, and matched rather
    /// than changed rows counted, which the conditional updates rely on) plus the TLS.
    pub(crate) async fn connect(&self) -> ConnectionResult<AsyncMysqlConnection> {
        let Some(ssl) = &self.ssl else {
            return AsyncMysqlConnection::establish(&self.url).await;
        };
        let opts = Opts::from_url(&self.url)
            .map_err(|e| ConnectionError::InvalidConnectionUrl(e.to_string()))?;
        let opts = OptsBuilder::from_opts(opts)
            .stmt_cache_size(0)
            .client_found_rows(true)
            .ssl_opts(ssl.clone());
        let conn = mysql_async::Conn::new(opts)
            .await
            .map_err(|e| ConnectionError::BadConnection(e.to_string()))?;
        AsyncMysqlConnection::try_from(conn).await
    }
}

impl From<&str> for Endpoint {
    fn from(url: &str) -> Self {
        Self::plain(url)
    }
}

impl From<&String> for Endpoint {
    fn from(url: &String) -> Self {
        Self::plain(url)
    }
}

impl From<&Endpoint> for Endpoint {
    fn from(endpoint: &Endpoint) -> Self {
        endpoint.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(ssl_mode: SslMode) -> MysqlSettings {
        MysqlSettings {
            url: "mysql://u:p@127.0.0.1:3306/db".into(),
            pool_size: 1,
            ssl_mode,
            ssl_ca_file: None,
            ssl_cert_file: None,
            ssl_key_file: None,
        }
    }

    #[test]
    fn certificate_files_with_tls_disabled_are_refused() {
        let disabled = MysqlSettings {
            ssl_ca_file: Some("ca.pem".into()),
            ..settings(SslMode::Disabled)
        };
        assert!(disabled.check().unwrap_err().contains("ssl_mode"));
    }

    #[test]
    fn half_a_client_certificate_is_refused() {
        let half = MysqlSettings {
            ssl_key_file: Some("client.key".into()),
            ..settings(SslMode::VerifyIdentity)
        };
        assert!(half.check().unwrap_err().contains("go together"));
    }

    #[test]
    fn a_missing_ca_file_is_named_at_start_up() {
        let missing = MysqlSettings {
            ssl_ca_file: Some("/nonexistent/ca.pem".into()),
            ..settings(SslMode::VerifyCa)
        };
        let error = missing.endpoint().unwrap_err().to_string();
        assert!(error.contains("/nonexistent/ca.pem"), "{error}");
    }

    #[test]
    fn a_client_key_the_driver_cannot_read_is_refused_at_start_up_with_the_fix() {
        let dir = std::env::temp_dir().join(format!("seckill-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("client.pem"), dir.join("client.key"));
        std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\n").unwrap();
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\n").unwrap();
        let pkcs8 = MysqlSettings {
            ssl_cert_file: Some(cert),
            ssl_key_file: Some(key),
            ..settings(SslMode::VerifyIdentity)
        };
        let error = pkcs8.endpoint().unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            error.contains("PKCS#1") && error.contains("-traditional"),
            "{error}"
        );
    }

    #[test]
    fn the_modes_are_spelt_as_the_mysql_client_spells_them() {
        #[derive(Deserialize)]
        struct Section {
            ssl_mode: SslMode,
        }
        for (text, mode) in [
            ("disabled", SslMode::Disabled),
            ("required", SslMode::Required),
            ("verify_ca", SslMode::VerifyCa),
            ("verify_identity", SslMode::VerifyIdentity),
        ] {
            let section: Section =
                serde_json::from_str(&format!(r#"{{"ssl_mode":"{text}"}}"#)).expect("a mode");
            assert_eq!(section.ssl_mode, mode);
        }
    }
}
