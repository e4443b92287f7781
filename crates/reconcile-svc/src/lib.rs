//! reconcile-svc: the audit of Redis flows against MySQL orders, stock flows and stock
//! totals, with idempotent repairs and a report. Runs once (`--once`, for a CronJob) or as
//! a daemon on the cron schedule from the settings.
//!
//! - [`audit`]: one run — classify, repair, record.
//! - [`lease`]: one run at a time, the lease renewed while a run lasts.
//! - [`room`]: whether MySQL can still take an order reconcile would re-publish.
//! - [`report`]: the JSON report and the terminal table.
//! - [`startup`]: wiring, the daemon's schedule and its HTTP endpoints; [`settings`]: its
//!   own section and the shared ones it reads.

pub mod audit;
pub mod lease;
pub mod report;
pub mod room;
pub mod settings;
pub mod startup;

pub use audit::{Auditor, ManualAction, Policy};
pub use settings::Settings;
pub use startup::Application;
