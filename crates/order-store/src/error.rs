//! Error policy: every failure of this crate is a [`StoreError`], and each variant says
//! through [`StoreError::is_retryable`] whether trying the same thing again later can
//! succeed. Callers act on that one bit — the consumer reconsumes a retryable failure and
//! records a permanent one; reconcile reports either — so a variant is retryable only when
//! the data is fine and the database (or the way to it) was in the way: connections,
//! pool exhaustion, timeouts, deadlocks, lock waits, writers racing on the same rows.
//! Anything about the data itself (not enough stock, a product with orders, a bad value)
//! fails the same way every time and is not retryable.
//!
//! The MySQL driver keeps only the server's message text (not its error code) for errors
//! diesel has no kind for, so deadlocks and lock-wait timeouts are recognised by message.

use std::time::Duration;

use diesel::result::{ConnectionError, DatabaseErrorKind, Error as DieselError};
use diesel_async::pooled_connection::PoolError as ManagerError;
use diesel_async::pooled_connection::deadpool::PoolError;
use domain::{OrderToken, ProductId};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("could not get a database connection from the pool")]
    Pool(#[source] PoolError),
    #[error("no database connection became free within {0:?}")]
    PoolTimeout(Duration),
    #[error("could not connect to the database")]
    Connect(#[source] ConnectionError),
    #[error("a database statement failed")]
    Query(#[from] DieselError),
    #[error("the database URL is not usable: {0}")]
    InvalidUrl(String),
    #[error("running the migrations failed")]
    Migration(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("another process held the migration lock for longer than {0:?}")]
    MigrationLockTimeout(Duration),
    #[error("product {product_id} already has {orders} orders; restock it with force instead")]
    OrdersExist { product_id: ProductId, orders: i64 },
    #[error("product {product_id} has fewer than the {wanted} units asked for")]
    InsufficientStock { product_id: ProductId, wanted: i64 },
    #[error(
        "product {product_id} has sold {sold} units already, more than the {wanted} asked for in all"
    )]
    StockBelowSold {
        product_id: ProductId,
        sold: i64,
        wanted: i64,
    },
    #[error("product {0} has no stock row")]
    UnknownProduct(ProductId),
    #[error("there is no order {0}")]
    OrderNotFound(OrderToken),
    #[error("concurrent writers still collided on the same orders after {attempts} attempts")]
    Conflict {
        attempts: u32,
        #[source]
        last: DieselError,
    },
    #[error("invalid data: {0}")]
    InvalidData(String),
    #[error("a blocking database task did not finish")]
    Join(#[from] tokio::task::JoinError),
}

impl StoreError {
    /// True when the same call may succeed later, unchanged; see the module docs.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Pool(e) => pool_error_is_retryable(e),
            Self::PoolTimeout(_) | Self::MigrationLockTimeout(_) | Self::Conflict { .. } => true,
            Self::Connect(e) => connection_error_is_retryable(e),
            Self::Query(e) => diesel_error_is_retryable(e),
            Self::InvalidUrl(_)
            | Self::Migration(_)
            | Self::OrdersExist { .. }
            | Self::InsufficientStock { .. }
            | Self::StockBelowSold { .. }
            | Self::UnknownProduct(_)
            | Self::OrderNotFound(_)
            | Self::InvalidData(_)
            | Self::Join(_) => false,
        }
    }
}

impl From<PoolError> for StoreError {
    fn from(e: PoolError) -> Self {
        Self::Pool(e)
    }
}

fn pool_error_is_retryable(e: &PoolError) -> bool {
    match e {
        PoolError::Backend(ManagerError::ConnectionError(e)) => connection_error_is_retryable(e),
        PoolError::Backend(ManagerError::QueryError(e)) => diesel_error_is_retryable(e),
        // A closed pool means this process is shutting down: the work belongs to the
        // next one, so hand it back rather than drop it.
        PoolError::Timeout(_) | PoolError::Closed | PoolError::PostCreateHook(_) => true,
        PoolError::NoRuntimeSpecified => false,
    }
}

fn connection_error_is_retryable(e: &ConnectionError) -> bool {
    match e {
        ConnectionError::InvalidCString(_) | ConnectionError::InvalidConnectionUrl(_) => false,
        ConnectionError::CouldntSetupConfiguration(e) => diesel_error_is_retryable(e),
        // BadConnection (refused, reset, server gone) and whatever diesel adds later.
        _ => true,
    }
}

/// Server and driver messages that mean "the database was in the way", not "the data is
/// wrong". Matched case-insensitively against the message diesel keeps.
const TRANSIENT_MESSAGES: &[&str] = &[
    "deadlock found",             // ER_LOCK_DEADLOCK 1213
    "lock wait timeout exceeded", // ER_LOCK_WAIT_TIMEOUT 1205
    "try restarting transaction",
    "input/output error", // mysql_async: socket failures
    "connection to the server is closed",
    "packet out of order",
    "server shutdown in progress",                      // 1053
    "connection was killed",                            // MariaDB 1927
    "query execution was interrupted",                  // 1317
    "too many connections",                             // 1040
    "server has gone away",                             // 2006
    "lost connection to",                               // 2013
    "the mysql server is running with the --read-only", // 1290 during a failover
];

pub(crate) fn diesel_error_is_retryable(e: &DieselError) -> bool {
    match e {
        DieselError::DatabaseError(kind, info) => match kind {
            DatabaseErrorKind::SerializationFailure | DatabaseErrorKind::ClosedConnection => true,
            DatabaseErrorKind::Unknown => {
                let message = info.message().to_ascii_lowercase();
                TRANSIENT_MESSAGES.iter().any(|m| message.contains(m))
            }
            _ => false,
        },
        DieselError::BrokenTransactionManager => true,
        _ => false,
    }
}

/// How mysql_async's own (client-side) failures read once diesel-async has turned them into
/// a `DatabaseError(Unknown, …)`: `Error::Io`, `Error::Driver` and `Error::Other` keep their
/// `Display` prefix, while a server's error keeps only its message. After any of them the
/// connection's protocol state is unknown (socket gone, packet out of order, …).
const CLIENT_SIDE_PREFIXES: &[&str] = &["input/output error", "driver error", "other error"];

/// Server errors after which the server has ended (or is ending) the session itself.
const SESSION_ENDED_MESSAGES: &[&str] = &[
    "server shutdown in progress",        // 1053
    "connection was killed",              // MariaDB 1927
    "server has gone away",               // 2006
    "lost connection to",                 // 2013
    "disconnected by the server because", // MySQL 4031, idle session closed
];

/// True when the connection a statement failed on must not be used again: the pool drops
/// it instead of handing it out (see `db::ConnWatch`). Statement-level refusals — a
/// duplicate key, a deadlock, a lock-wait timeout, a value out of range — leave the
/// connection as good as before and return false.
pub(crate) fn breaks_connection(e: &DieselError) -> bool {
    match e {
        DieselError::DatabaseError(DatabaseErrorKind::ClosedConnection, _) => true,
        DieselError::DatabaseError(DatabaseErrorKind::Unknown, info) => {
            let message = info.message().to_ascii_lowercase();
            CLIENT_SIDE_PREFIXES.iter().any(|p| message.starts_with(p))
                || SESSION_ENDED_MESSAGES.iter().any(|m| message.contains(m))
        }
        _ => false,
    }
}

/// InnoDB chose this transaction as a deadlock's victim and rolled it back: running it
/// again, whole, normally passes.
pub(crate) fn is_deadlock(e: &DieselError) -> bool {
    matches!(e, DieselError::DatabaseError(DatabaseErrorKind::Unknown, info)
        if info.message().to_ascii_lowercase().contains("deadlock found"))
}

/// A deadlock or a unique-key collision with a concurrent writer: worth re-running the
/// whole transaction at once, because the next attempt will see what the other committed.
pub(crate) fn is_write_race(e: &DieselError) -> bool {
    match e {
        DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _) => true,
        _ => is_deadlock(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db_error(kind: DatabaseErrorKind, message: &str) -> StoreError {
        StoreError::Query(DieselError::DatabaseError(
            kind,
            Box::new(message.to_owned()),
        ))
    }

    #[test]
    fn deadlocks_lock_waits_and_lost_connections_are_retryable() {
        for message in [
            "Deadlock found when trying to get lock; try restarting transaction",
            "Lock wait timeout exceeded; try restarting transaction",
            "Input/output error: broken pipe",
            "Connection to the server is closed.",
        ] {
            assert!(
                db_error(DatabaseErrorKind::Unknown, message).is_retryable(),
                "{message}"
            );
        }
        assert!(StoreError::PoolTimeout(Duration::from_secs(1)).is_retryable());
        assert!(
            StoreError::Connect(ConnectionError::BadConnection("refused".into())).is_retryable()
        );
    }

    #[test]
    fn data_errors_are_not_retryable() {
        assert!(!db_error(DatabaseErrorKind::UniqueViolation, "Duplicate entry").is_retryable());
        assert!(!db_error(DatabaseErrorKind::Unknown, "Data too long for column").is_retryable());
        assert!(
            !StoreError::InsufficientStock {
                product_id: ProductId(1),
                wanted: 2
            }
            .is_retryable()
        );
        assert!(
            !StoreError::OrdersExist {
                product_id: ProductId(1),
                orders: 1
            }
            .is_retryable()
        );
        assert!(!StoreError::Query(DieselError::NotFound).is_retryable());
        assert!(
            !StoreError::Connect(ConnectionError::InvalidConnectionUrl("x".into())).is_retryable()
        );
    }

    #[test]
    fn client_side_failures_and_ended_sessions_break_the_connection_statement_errors_do_not() {
        let unknown = |m: &str| {
            DieselError::DatabaseError(DatabaseErrorKind::Unknown, Box::new(m.to_owned()))
        };
        for message in [
            "Input/output error: broken pipe",
            "Driver error: `Connection to the server is closed.'",
            "Driver error: `Packet out of order.'",
            "Connection was killed",
            "Server shutdown in progress",
        ] {
            assert!(breaks_connection(&unknown(message)), "{message}");
        }
        assert!(breaks_connection(&DieselError::DatabaseError(
            DatabaseErrorKind::ClosedConnection,
            Box::new("closed".to_owned())
        )));
        for message in [
            "Deadlock found when trying to get lock; try restarting transaction",
            "Lock wait timeout exceeded; try restarting transaction",
            "Data too long for column 'name' at row 1",
        ] {
            assert!(!breaks_connection(&unknown(message)), "{message}");
        }
        assert!(!breaks_connection(&DieselError::DatabaseError(
            DatabaseErrorKind::UniqueViolation,
            Box::new("Duplicate entry".to_owned())
        )));
        assert!(!breaks_connection(&DieselError::NotFound));
    }

    #[test]
    fn a_unique_violation_or_deadlock_is_a_write_race() {
        assert!(is_write_race(&DieselError::DatabaseError(
            DatabaseErrorKind::UniqueViolation,
            Box::new("Duplicate entry".to_owned())
        )));
        assert!(is_write_race(&DieselError::DatabaseError(
            DatabaseErrorKind::Unknown,
            Box::new("Deadlock found when trying to get lock".to_owned())
        )));
        assert!(!is_write_race(&DieselError::NotFound));
    }
}
