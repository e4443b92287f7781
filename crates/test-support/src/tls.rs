//! The local stack's TLS: Redis's TLS port and MariaDB present a certificate for 127.0.0.1
//! signed by the run folder's own CA (`deploy/local/tls-certs.sh`, run by `stack.sh up`).
//! Redis's TLS port asks every client for a certificate of that CA; MariaDB asks it of the
//! user `seckill_tls` (`REQUIRE X509`).

use std::path::PathBuf;

const DEFAULT_REDIS_TLS_URL: &str = "rediss://127.0.0.1:16380";
const DEFAULT_MYSQL_TLS_USER: &str = "seckill_tls:seckill";

/// The CA, server and client certificates: `SECKILL_TEST_TLS_DIR`, or the default run
/// folder's `stack/tls`.
pub fn dir() -> PathBuf {
    std::env::var_os("SECKILL_TEST_TLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.run/stack/tls"))
}

/// A file of [`dir`], which must exist: a test that silently ran without TLS material
/// would prove nothing.
pub fn file(name: &str) -> PathBuf {
    let path = dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: `deploy/local/stack.sh up` makes the stack's certificates",
        path.display()
    );
    path
}

/// Redis's TLS port: `SECKILL_TEST_REDIS_TLS_URL`, or the local stack's.
pub fn redis_url() -> String {
    std::env::var("SECKILL_TEST_REDIS_TLS_URL").unwrap_or_else(|_| DEFAULT_REDIS_TLS_URL.into())
}

/// `url` (a `mysql://user:password@host:port/...` URL of the test server) with the user
/// that MariaDB admits only over TLS with a client certificate.
pub fn mysql_url_as_tls_user(url: &str) -> String {
    let (_, at_host) = url
        .strip_prefix("mysql://")
        .and_then(|rest| rest.split_once('@'))
        .expect("a mysql://user:password@host URL");
    format!("mysql://{DEFAULT_MYSQL_TLS_USER}@{at_host}")
}
