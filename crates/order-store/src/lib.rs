//! The order database: the MySQL schema, its migrations, and every query the services run
//! against it. The consumer writes order batches here (idempotent, one transaction per
//! batch, stock taken with a conditional update); operators define products; reconcile
//! reads orders and stock_flow in batches, repairs what it may, and records its runs.
//! After the purchase, an order awaits payment until its `pay_by` and ends once, paid,
//! cancelled or expired, each decided by one conditional update (`repo/lifecycle.rs`).
//! The services write no SQL of their own.
//!
//! Layout: [`db`] holds the [`Db`] handle (a diesel-async deadpool pool); [`mod@migrate`] the
//! embedded migrations of the repository's `migrations/` and the locked runner;
//! [`schema`] diesel's view of the tables; [`models`] what the repositories take and
//! return, in domain types; `repo/` the repositories themselves, as `impl Db` blocks per
//! area (products, orders, lifecycle, reconcile, lease, rejected messages); [`error`] the one error
//! type and its retry policy. All times are UTC: every connection sets `time_zone` to
//! `+00:00`. MySQL 8 in production, MariaDB locally: the SQL is what both accept.

pub mod db;
pub mod error;
pub mod migrate;
pub mod models;
mod repo;
pub mod schema;
pub mod settings;

pub use db::{Db, split_database_url};
pub use error::{Result, StoreError};
pub use migrate::{MIGRATIONS, create_database, migrate};
pub use models::{
    CloseOutcome, DiscrepancyRecord, DiscrepancyRow, LifecycleCounts, NewProduct, OrderFacts,
    OrderPageRow, OrderRow, Payment, PaymentOutcome, ProductRow, PutOutcome, RefundDue, RunRow,
    RunStatus, StockOp, UnwritableOrderRow, WriteSummary,
};
pub use repo::DEFAULT_PAYMENT_WINDOW;
pub use repo::PutError;
pub use settings::{Endpoint, MysqlSettings, SslMode};
