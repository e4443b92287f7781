//! Integration tests of the order store against the real MariaDB (MySQL 8 in production):
//! every test makes its own database with `test_support::mysql::TestDb`, so they run in
//! parallel. Start the server with `bash deploy/local/stack.sh up`.

mod helpers;
mod lease;
mod lifecycle;
mod migrations;
mod orders;
mod pool;
mod products;
mod reconcile;
mod tls;
