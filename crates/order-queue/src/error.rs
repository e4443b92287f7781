//! Error policy: every failure that reaches a caller is an [`MqError`] whose variant says what
//! the caller can do about it. Client errors are kept whole as the `source` (log the chain);
//! nothing here retries on its own — the gateway releases the unit, reconcile tries again next
//! run, a service that cannot start exits. Problems inside listeners never become errors: they
//! are decisions (`Rollback`, `Unknown`, `RetryLater`) handed back to the broker, and logged.

use rocketmq_client_rust::ClientError;

#[derive(Debug, thiserror::Error)]
pub enum MqError {
    /// The client's own Tokio runtime or client runtime could not be built.
    #[error("the RocketMQ client runtime could not be built: {0}")]
    Runtime(String),

    /// A producer or consumer could not be started, subscribed or asked something.
    #[error("RocketMQ {action} failed")]
    Client {
        action: &'static str,
        #[source]
        source: ClientError,
    },

    /// The send did not complete: timeout, broker down, no route. For a transactional send
    /// this means the half message is **not known to be stored**.
    #[error("the message could not be sent")]
    Send(#[source] ClientError),

    /// The broker answered, but did not report the message as stored (a flush or replica
    /// timeout on a plain send).
    #[error("the broker did not store the message: {0}")]
    NotStored(String),

    /// The message could not be built (for example a property the broker reserves).
    #[error("the message could not be built: {0}")]
    InvalidMessage(String),

    /// The name server knows no broker for the topic.
    #[error("the name server has no route for topic `{0}`")]
    NoRoute(String),

    /// The topic was created but the name server did not show a route for it in time.
    #[error("topic `{topic}` was created but has no route on the name server after {waited_ms} ms")]
    TopicNotVisible { topic: String, waited_ms: u64 },

    /// The publisher has been shut down.
    #[error("the publisher has been shut down")]
    ShutDown,
}

impl MqError {
    pub(crate) fn client(action: &'static str) -> impl FnOnce(ClientError) -> Self {
        move |source| Self::Client { action, source }
    }
}
