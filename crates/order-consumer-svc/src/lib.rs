//! order-consumer-svc: drains committed order messages into MySQL, in batches, idempotently.
//! Scaled on its own; its parallelism is bounded by the topic's queue count.
//!
//! - [`startup`]: `Application::build(settings)` and `run_until_stopped`.
//! - [`writer`]: one batch → one MySQL transaction → "confirmed" in Redis.

pub mod startup;
pub mod writer;

pub use startup::Application;
