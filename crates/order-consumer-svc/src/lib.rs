//! order-consumer-svc: drains committed order messages into MySQL, in batches, idempotently.
//! Scaled on its own; its parallelism is bounded by the topic's queue count.
//!
//! - [`startup`]: `Application::build(settings)` and `run_until_stopped`; [`settings`]: its
//!   own section and the shared ones it reads.
//! - [`writer`]: one batch → one MySQL transaction → its payment deadline sent to the
//!   broker → "confirmed" in Redis.
//! - [`expirer`]: a deadline come due → its unpaid orders expire, their units back on sale.
//! - [`backlog`]: the group's backlog in orders, exported for the autoscaler.
//!
//! Crash points for the fault drills (`crates/fault-drills`), present only with the
//! `failpoints` feature and armed by `FAILPOINTS` (see `platform::faults`), e.g.
//! `FAILPOINTS=consumer::after_commit=1*return` crashes the process at the first batch to
//! get there; `…=1*sleep(3000)` holds that batch 3 s instead:
//!
//! | fail point | where, in [`writer`] | what a crash there leaves behind |
//! | --- | --- | --- |
//! | `consumer::before_commit` | a decoded batch, before its MySQL transaction | a batch pulled and not acknowledged, nothing of it written |
//! | `consumer::after_commit` | the batch's transaction committed, before "confirmed" in Redis and the acknowledgement | a batch written and not acknowledged: it comes again |

pub mod backlog;
pub mod expirer;
pub mod settings;
pub mod startup;
pub mod writer;

pub use settings::Settings;
pub use startup::Application;
