//! Helpers for integration tests against the real servers; a dev-dependency only.
//! Each helper gives a test its own isolated piece of a shared server and removes it
//! afterwards, so tests run in parallel without seeing each other.
//!
//! - [`mysql`]: a fresh, migrated MySQL/MariaDB database per test ([`mysql::TestDb`]).

pub mod mysql;
