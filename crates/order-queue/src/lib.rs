//! RocketMQ plumbing for order messages, shared by the three services: the gateway sends each
//! winning purchase as a **transactional** message whose local transaction (and the broker's
//! check-back) is the caller's [`LocalTransaction`]; order-consumer-svc receives committed
//! messages in batches through a [`BatchHandler`]; reconcile-svc re-publishes a missing order as
//! a plain message. Nothing here knows about Redis or MySQL — the services plug those in.
//!
//! Layout: [`runtime`] owns the client's own Tokio runtime (the RocketMQ client never uses the
//! caller's) and must be shut down explicitly; [`settings`] is the plain configuration;
//! [`message`] turns an [`domain::OrderPlaced`] into a RocketMQ message (topic, tag, key = order
//! token, JSON body, `traceparent` user property) and a received one into a [`Delivery`];
//! [`publisher`] holds [`OrderPublisher`] and the transaction listener adapter; [`subscriber`]
//! holds [`OrderSubscriber`]; [`batcher`] sends several winners of one product under one
//! transactional message ([`OrderBatcher`]); [`topic`] creates the topic at start-up; [`backlog`] counts the
//! messages the consumers have still to write; [`deadline`] carries each order's payment
//! deadline on the broker's timer ([`DeadlinePublisher`], [`DeadlineSubscriber`]); [`error`]
//! is [`MqError`].
//!
//! The client calls listeners **synchronously on its blocking pool** (not on an async worker),
//! which is why [`LocalTransaction`] and [`BatchHandler`] are plain `fn`s: an implementation
//! that needs async I/O blocks on it with `tokio::runtime::Handle::block_on` using a handle to
//! the service's own runtime (allowed there, since these threads are not async contexts). That
//! pool rejects work when full instead of queueing it — a rejected local transaction ends as
//! `Unknown` and waits for the broker's check-back — so size it with
//! [`MqRuntime::new`]'s `blocking_parallelism` for the concurrency the service expects.

pub mod backlog;
pub mod batcher;
mod consumer;
pub mod deadline;
pub mod error;
pub mod message;
mod pace;
pub mod publisher;
pub mod runtime;
pub mod settings;
pub mod subscriber;
pub mod topic;

pub use backlog::OrderBacklog;
pub use batcher::{BatchTuning, BatchedSend, OrderBatcher, SendFailed};
pub use deadline::{
    Deadline, DeadlineDecodeError, DeadlineHandler, DeadlinePublisher, DeadlineSubscriber,
    DeadlineTuning, Due,
};
pub use error::MqError;
pub use message::{Delivery, TRACEPARENT_PROPERTY};
pub use publisher::{LocalTransaction, OrderPublisher, TxDecision};
pub use runtime::MqRuntime;
pub use settings::MqSettings;
pub use subscriber::{BatchHandler, BatchVerdict, ConsumerTuning, OrderSubscriber};
pub use topic::ensure_topic;

/// Results of this crate.
pub type Result<T, E = MqError> = std::result::Result<T, E>;
