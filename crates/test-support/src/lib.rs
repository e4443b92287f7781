//! Helpers for integration tests against the real servers; a dev-dependency only.
//! Each helper gives a test its own isolated piece of a shared server and removes it
//! afterwards, so tests run in parallel without seeing each other.
//!
//! - [`mysql`]: a fresh, migrated MySQL/MariaDB database per test ([`mysql::TestDb`]).
//! - [`redis`]: a key prefix of its own per test ([`redis::TestRedis`]), or a server of its
//!   own to stall ([`redis::PrivateRedis`]).
//! - [`redis_topology`]: a Sentinel group or a Cluster of the test's own, to fail over or
//!   reshard under a client ([`redis_topology::SentinelGroup`], [`redis_topology::RedisCluster`]).
//! - [`stack`]: both, plus a topic and groups, and the settings that point at them.
//! - [`process`]: the services' real binaries as child processes.
//! - [`service`]: a service in this process, on its own thread and runtime.
//! - [`eventually`]: poll a condition with a deadline — tests wait for events, never for
//!   a fixed time where something can be polled.

pub mod mysql;
pub mod process;
pub mod redis;
pub mod redis_topology;
pub mod service;
pub mod stack;
pub mod tls;

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`eventually`] asks again.
const POLL: Duration = Duration::from_millis(100);

/// Asks `check` every 100 ms until it answers `Some`, and returns that. Panics with `what`
/// when `within` passes first.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(POLL).await;
    }
}
