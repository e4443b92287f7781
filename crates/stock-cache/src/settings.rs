//! The `[redis]` section of a service's settings, and the connection it describes.
//!
//! `mode` says what Redis is (see [`RedisMode`]): one server at `url`, a primary named by
//! the sentinels in `nodes`, or a cluster found through the seed nodes in `nodes`.
//!
//! A `redis://` URL is plain TCP. A `rediss://` URL is TLS: the server's certificate is
//! checked against `tls_ca_file` (a managed Redis's own CA) or, unset, the system's roots,
//! and `tls_cert_file` / `tls_key_file` are presented to a server that asks for a client
//! certificate. redis-rs's `rediss://…/#insecure` skips the check; it is for a laptop, never
//! for a sale.

use std::path::{Path, PathBuf};
use std::time::Duration;

use deadpool_redis::redis::{
    self, ClientTlsConfig, ConnectionInfo, IntoConnectionInfo, TlsCertificates,
};
use serde::{Deserialize, Deserializer};

use crate::topology::{SentinelSpec, Topology};
use crate::{CacheError, StockCache};

/// What the Redis of a deployment is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisMode {
    /// One server, at `url`.
    #[default]
    Standalone,
    /// A primary and its replicas watched by Redis Sentinel: `nodes` are the sentinels,
    /// `master_name` the group they watch. The primary they name is reached with `url`'s
    /// scheme (`rediss://`: TLS), user, password and database; its host and port are not
    /// used.
    Sentinel,
    /// A Redis Cluster: `nodes` are seed nodes, the first of which gives the scheme, user and
    /// password for every node; `url` is not used.
    Cluster,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RedisSettings {
    #[serde(default)]
    pub mode: RedisMode,
    pub url: String,
    /// `redis://host:port` URLs: the sentinels (sentinel mode) or seed nodes (cluster mode).
    /// A list in a file; a comma-separated list in a variable.
    #[serde(default, deserialize_with = "list_or_commas")]
    pub nodes: Vec<String>,
    /// The group the sentinels watch (sentinel mode).
    #[serde(default)]
    pub master_name: Option<String>,
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
    /// Settings for one server at `url` with nothing else set: one connection, a second's
    /// timeout, no replicas waited for, no TLS files. For tools and tests; the services read
    /// theirs from the configuration.
    pub fn standalone(url: impl Into<String>, key_prefix: impl Into<String>) -> Self {
        Self {
            mode: RedisMode::Standalone,
            url: url.into(),
            nodes: Vec::new(),
            master_name: None,
            key_prefix: key_prefix.into(),
            pool_size: 1,
            timeout_ms: 1000,
            wait_replicas: 0,
            wait_timeout_ms: 0,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }

    /// What the settings cannot mean: a mode without the nodes it needs, or nodes it would
    /// ignore; TLS files beside a plain URL (they would be ignored, and the connection would
    /// go out unencrypted), or half a client certificate.
    pub fn check(&self) -> Result<(), String> {
        match (self.mode, self.nodes.is_empty(), &self.master_name) {
            (RedisMode::Standalone, false, _) => {
                return Err("redis.nodes is for redis.mode sentinel or cluster; \
                     in standalone mode redis.url is the server"
                    .into());
            }
            (RedisMode::Standalone | RedisMode::Cluster, _, Some(_)) => {
                return Err("redis.master_name is for redis.mode = \"sentinel\"".into());
            }
            (RedisMode::Sentinel, true, _) | (RedisMode::Sentinel, _, None) => {
                return Err(
                    "redis.mode = \"sentinel\" needs redis.nodes (the sentinels) \
                     and redis.master_name (the group they watch)"
                        .into(),
                );
            }
            (RedisMode::Cluster, true, _) => {
                return Err("redis.mode = \"cluster\" needs redis.nodes (seed nodes)".into());
            }
            _ => {}
        }
        let tls_files = [&self.tls_ca_file, &self.tls_cert_file, &self.tls_key_file];
        if !self.speaks_tls() && tls_files.iter().any(|file| file.is_some()) {
            return Err(
                "redis.tls_ca_file, tls_cert_file and tls_key_file are for rediss:// URLs; \
                 the data nodes' URL is not one, and would connect without TLS"
                    .into(),
            );
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            return Err("redis.tls_cert_file and redis.tls_key_file go together".into());
        }
        Ok(())
    }

    /// Whether the data nodes are reached over TLS: `url` in standalone and sentinel mode,
    /// the first seed node in cluster mode.
    fn speaks_tls(&self) -> bool {
        let data_nodes = match self.mode {
            RedisMode::Cluster => self.nodes.first().map_or("", String::as_str),
            RedisMode::Standalone | RedisMode::Sentinel => &self.url,
        };
        data_nodes.starts_with("rediss://")
    }

    /// The server, and for `rediss://` the certificates read from their files.
    pub fn connection_info(&self) -> Result<ConnectionInfo, CacheError> {
        let info = parse("redis.url", &self.url)?;
        match self.certificates()? {
            Some(certificates) => redis::Client::build_with_tls(info, certificates)
                .map(|client| client.get_connection_info().clone())
                .map_err(|e| bad_url("redis.url", e)),
            None => Ok(info),
        }
    }

    /// Where the data is, as `mode` says, with the certificates read from their files.
    pub fn topology(&self) -> Result<Topology, CacheError> {
        let nodes = || -> Result<Vec<ConnectionInfo>, CacheError> {
            self.nodes
                .iter()
                .map(|node| parse("redis.nodes", node))
                .collect()
        };
        match self.mode {
            RedisMode::Standalone => Ok(self.connection_info()?.into()),
            RedisMode::Sentinel => Topology::sentinel(SentinelSpec {
                master_name: self.master_name.as_deref().unwrap_or_default(),
                sentinels: nodes()?,
                data_nodes: &parse("redis.url", &self.url)?,
                certificates: self.certificates()?,
            })
            .map_err(|e| bad_url("redis.nodes", e)),
            RedisMode::Cluster => Topology::cluster(
                nodes()?,
                self.certificates()?,
                crate::response_timeout(Duration::from_millis(self.timeout_ms)),
            )
            .map_err(|e| bad_url("redis.nodes", e)),
        }
    }

    /// The CA and client certificate, when the connections are TLS and files are set.
    fn certificates(&self) -> Result<Option<TlsCertificates>, CacheError> {
        if !self.speaks_tls() {
            return Ok(None);
        }
        let client_tls = match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: read_pem(cert)?,
                client_key: read_pem(key)?,
            }),
            _ => None,
        };
        let root_cert = self.tls_ca_file.as_deref().map(read_pem).transpose()?;
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert,
        }))
    }

    /// A handle on this Redis, opening at most `pool_size` connections at once.
    pub fn open(&self, pool_size: usize) -> Result<StockCache, CacheError> {
        StockCache::on(
            self.topology()?,
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

fn parse(setting: &str, url: &str) -> Result<ConnectionInfo, CacheError> {
    url.into_connection_info().map_err(|e| bad_url(setting, e))
}

fn bad_url(setting: &str, error: redis::RedisError) -> CacheError {
    CacheError::Pool(format!("{setting}: {error}"))
}

/// `nodes` from a file is a list; from a variable (`SECKILL_REDIS__NODES=a,b`) a string.
fn list_or_commas<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Nodes {
        List(Vec<String>),
        Commas(String),
    }
    Ok(match Nodes::deserialize(deserializer)? {
        Nodes::List(nodes) => nodes,
        Nodes::Commas(nodes) => nodes
            .split(',')
            .map(str::trim)
            .filter(|node| !node.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str) -> RedisSettings {
        RedisSettings::standalone(url, "sk")
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

    fn in_mode(mode: RedisMode, nodes: &[&str], master_name: Option<&str>) -> RedisSettings {
        RedisSettings {
            mode,
            nodes: nodes.iter().map(|node| (*node).to_owned()).collect(),
            master_name: master_name.map(str::to_owned),
            ..settings("redis://127.0.0.1:6379")
        }
    }

    #[test]
    fn each_mode_takes_the_settings_it_needs_and_no_others() {
        use RedisMode::*;
        let node = &["redis://127.0.0.1:26379"][..];
        assert_eq!(in_mode(Sentinel, node, Some("seckill")).check(), Ok(()));
        assert_eq!(in_mode(Cluster, node, None).check(), Ok(()));
        let refusals = [
            (in_mode(Standalone, node, None), "redis.nodes is for"),
            (
                in_mode(Standalone, &[], Some("seckill")),
                "master_name is for",
            ),
            (
                in_mode(Cluster, node, Some("seckill")),
                "master_name is for",
            ),
            (
                in_mode(Sentinel, node, None),
                "needs redis.nodes (the sentinels)",
            ),
            (
                in_mode(Sentinel, &[], Some("seckill")),
                "needs redis.nodes (the sentinels)",
            ),
            (
                in_mode(Cluster, &[], None),
                "needs redis.nodes (seed nodes)",
            ),
        ];
        for (settings, refusal) in refusals {
            let error = settings.check().unwrap_err();
            assert!(error.contains(refusal), "{error}");
        }
    }

    #[test]
    fn tls_files_go_with_the_url_of_the_data_nodes_in_each_mode() {
        let with_ca = |settings: RedisSettings| RedisSettings {
            tls_ca_file: Some("ca.pem".into()),
            ..settings
        };
        let sentinel = RedisSettings {
            url: "rediss://primary/0".into(),
            ..in_mode(RedisMode::Sentinel, &["redis://s:26379"], Some("seckill"))
        };
        assert_eq!(with_ca(sentinel).check(), Ok(()));
        let cluster = in_mode(RedisMode::Cluster, &["rediss://a:7000"], None);
        assert_eq!(with_ca(cluster).check(), Ok(()));
        let plain_cluster = RedisSettings {
            url: "rediss://ignored:6380".into(),
            ..in_mode(RedisMode::Cluster, &["redis://a:7000"], None)
        };
        assert!(with_ca(plain_cluster).check().is_err());
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
