//! Helpers for integration tests against the real servers; a dev-dependency only.
//! Each helper gives a test its own isolated piece of a shared server and removes it
//! afterwards, so tests run in parallel without seeing each other.
//!
//! - [`mysql`]: a fresh, migrated MySQL/MariaDB database per test ([`mysql::TestDb`]).
//! - [`redis`]: a key prefix of its own per test ([`redis::TestRedis`]), or a server of its
//!   own to stall ([`redis::PrivateRedis`]).
//! - [`stack`]: both, plus a topic and groups, and the settings that point at them.
//! - [`process`]: the services' real binaries as child processes.
//! - [`service`]: a service in this process, on its own thread and runtime.

pub mod mysql;
pub mod process;
pub mod redis;
pub mod service;
pub mod stack;
