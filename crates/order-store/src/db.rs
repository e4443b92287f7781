//! The [`Db`] handle: a pool of async MySQL connections that every repository method
//! borrows one connection from for the length of one call (one transaction at most).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::IntoSql;
use diesel::connection::{Instrumentation, InstrumentationEvent, get_default_instrumentation};
use diesel::result::{ConnectionResult, DatabaseErrorKind, Error as DieselError, QueryResult};
use diesel::sql_types::Integer;
use diesel_async::pooled_connection::deadpool::{Object, Pool};
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};

use crate::error::{Result, StoreError, breaks_connection};
use crate::settings::Endpoint;

/// How long a caller waits for a free connection (or a new one to be made) before the
/// call fails as retryable. deadpool itself would wait for ever without a runtime-bound
/// timeout; a consumer stuck there holds its messages hostage.
const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// A pooled connection that last heard from the server longer ago than this is checked
/// with a test query (`SELECT 1`) before it is handed out; one used more recently is
/// handed out as it is. See [`recycle`].
const VERIFY_AFTER_IDLE: Duration = Duration::from_secs(1);

pub(crate) type Conn = Object<AsyncMysqlConnection>;

/// A cheap-to-clone handle on the order database.
#[derive(Clone)]
pub struct Db {
    /// The connections; deadpool hands each out to one caller at a time.
    pool: Pool<AsyncMysqlConnection>,
    /// Kept for [`Db::with_own_pool`]; it carries the password, so it is never printed.
    endpoint: Arc<Endpoint>,
    /// See [`DEFAULT_ACQUIRE_TIMEOUT`].
    acquire_timeout: Duration,
}

impl fmt::Debug for Db {
    // The URL carries the password: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.pool.status();
        f.debug_struct("Db")
            .field("max_size", &status.max_size)
            .field("size", &status.size)
            .field("available", &status.available)
            .finish()
    }
}

impl Db {
    /// Builds a pool of at most `pool_size` connections to `endpoint`: a URL
    /// (`mysql://user:password@host:port/database`), or
    /// [`MysqlSettings::endpoint`](crate::MysqlSettings::endpoint) for TLS. Connections are
    /// made lazily, so this succeeds while the database is down; call [`Db::ping`] to find
    /// out.
    pub fn connect(endpoint: impl Into<Endpoint>, pool_size: usize) -> Result<Self> {
        let endpoint = Arc::new(endpoint.into());
        if pool_size == 0 {
            return Err(StoreError::InvalidData(
                "the pool size must be at least 1".into(),
            ));
        }
        // Not diesel-async's default recycling (`Verified`: a `SELECT 1` round trip on every
        // checkout, i.e. one more per consumer batch) nor plain `Fast` (no check at all,
        // so a connection that died — MariaDB restarted, the session killed — would go on
        // failing every call it is lent to: diesel-async drops a connection only when its
        // transaction state is broken, not when a plain query failed). `recycle` below
        // keeps Fast's zero round trips for a connection in steady use and drops one whose
        // last statement lost the connection.
        let mut config = ManagerConfig::default();
        let for_pool = endpoint.clone();
        config.custom_setup = Box::new(move |_url| establish(for_pool.clone()));
        config.recycling_method = RecyclingMethod::CustomFunction(Box::new(recycle));
        let manager = AsyncDieselConnectionManager::<AsyncMysqlConnection>::new_with_config(
            endpoint.url(),
            config,
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size)
            .build()
            .map_err(|e| StoreError::InvalidUrl(e.to_string()))?;
        Ok(Self {
            pool,
            endpoint,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
        })
    }

    /// Another handle on the same database with a pool of its own, of `pool_size`
    /// connections (at least one). A connection's socket belongs to the tokio runtime that
    /// opened it and stops working when that runtime ends: a service whose runtimes end at
    /// different times (each actix-web worker is one) gives each runtime its own pool.
    pub fn with_own_pool(&self, pool_size: usize) -> Self {
        let own = Self::connect(self.endpoint.as_ref(), pool_size.max(1))
            .expect("the endpoint and a non-zero size built a pool before");
        own.with_acquire_timeout(self.acquire_timeout)
    }

    /// The same pool, with another limit on the wait for a connection.
    pub fn with_acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// One round trip: the database answers (readiness probes).
    pub async fn ping(&self) -> Result<()> {
        let mut conn = self.conn().await?;
        Ok(select_one(&mut conn).await?)
    }

    /// Closes the pool: idle connections are dropped now, busy ones when they come back,
    /// and every later call fails (retryably). For shutdown, and before dropping a database.
    pub fn close(&self) {
        self.pool.close();
    }

    pub(crate) async fn conn(&self) -> Result<Conn> {
        match tokio::time::timeout(self.acquire_timeout, self.pool.get()).await {
            Ok(conn) => Ok(conn?),
            Err(_) => Err(StoreError::PoolTimeout(self.acquire_timeout)),
        }
    }
}

type BoxedFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the pool knows of one connection, kept as the connection's diesel instrumentation
/// (the one hook that sees the outcome of every statement, whichever repository ran it).
struct ConnWatch {
    /// A statement failed in a way that leaves the connection unusable
    /// ([`breaks_connection`]): the pool must drop it.
    broken: bool,
    /// When the server last answered on it (success or a statement-level error).
    last_answer: Instant,
    /// The process-wide default instrumentation, if one was set, still called.
    inner: Option<Box<dyn Instrumentation>>,
}

impl Instrumentation for ConnWatch {
    fn on_connection_event(&mut self, event: InstrumentationEvent<'_>) {
        if let InstrumentationEvent::FinishQuery { error, .. } = &event {
            match error {
                Some(e) if breaks_connection(e) => self.broken = true,
                _ => self.last_answer = Instant::now(),
            }
        }
        if let Some(inner) = &mut self.inner {
            inner.on_connection_event(event);
        }
    }
}

/// The pool's way to make a connection: the endpoint's, plus its [`ConnWatch`].
fn establish(
    endpoint: Arc<Endpoint>,
) -> BoxedFuture<'static, ConnectionResult<AsyncMysqlConnection>> {
    Box::pin(async move {
        let mut conn = endpoint.connect().await?;
        conn.set_instrumentation(ConnWatch {
            broken: false,
            last_answer: Instant::now(),
            inner: get_default_instrumentation(),
        });
        Ok(conn)
    })
}

/// Run by the pool on every checkout of an idle connection, after diesel-async's own check
/// (a connection with an open or broken transaction is dropped). An error drops the
/// connection and the pool tries the next one (or makes a new one); the caller never sees
/// it.
///
/// - The connection's last statement lost it (I/O error, closed, killed): dropped without
///   a round trip. A failure inside a transaction already broke its transaction state;
///   this covers the statements outside one (a stock read, a ping, a reconcile page).
/// - It has been idle for [`VERIFY_AFTER_IDLE`] or more: `SELECT 1`, as `Verified` would.
///   An idle connection is the one a restart, a `wait_timeout` or a proxy can have closed
///   without anyone noticing yet.
/// - Otherwise it answered a moment ago: handed out at once (`Fast`).
fn recycle(conn: &mut AsyncMysqlConnection) -> BoxedFuture<'_, QueryResult<()>> {
    Box::pin(async move {
        let verdict = conn
            .instrumentation()
            .downcast_ref::<ConnWatch>()
            .map(|watch| (watch.broken, watch.last_answer.elapsed()));
        match verdict {
            Some((true, _)) => Err(DieselError::DatabaseError(
                DatabaseErrorKind::ClosedConnection,
                Box::new("a statement lost this connection".to_owned()),
            )),
            Some((false, idle)) if idle < VERIFY_AFTER_IDLE => Ok(()),
            // Idle, or (never, since `establish` sets it) no watch: verify.
            _ => select_one(conn).await,
        }
    })
}

/// `SELECT ?` with 1 bound: unlike `SELECT 1` from a SQL literal (which diesel never caches,
/// so each run would prepare, execute and close a statement), a cached prepared statement
/// — one round trip.
async fn select_one(conn: &mut AsyncMysqlConnection) -> QueryResult<()> {
    diesel::select(1_i32.into_sql::<Integer>())
        .get_result::<i32>(conn)
        .await
        .map(|_| ())
}

/// Splits `mysql://…/database?options` into the URL of the server alone (same options)
/// and the database name, for the steps that must run before the database exists.
pub fn split_database_url(url: &str) -> Result<(String, Option<String>)> {
    let bad = |why: &str| {
        StoreError::InvalidUrl(format!(
            "{why} (expected mysql://user:password@host:port/database)"
        ))
    };
    let rest = url
        .strip_prefix("mysql://")
        .ok_or_else(|| bad("the URL does not start with mysql://"))?;
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    // A user name or password holds no bare '/' (it must be percent-encoded), so the first
    // one ends the host part.
    let (authority, database) = match before_query.split_once('/') {
        Some((authority, database)) => (authority, Some(database)),
        None => (before_query, None),
    };
    if authority.is_empty() {
        return Err(bad("the URL names no host"));
    }
    let database = database.filter(|d| !d.is_empty()).map(str::to_owned);
    if let Some(name) = &database {
        check_database_name(name)?;
    }
    let mut server = format!("mysql://{authority}");
    if let Some(query) = query {
        server.push('?');
        server.push_str(query);
    }
    Ok((server, database))
}

/// Database names go into DDL (which takes no bind parameters), so only names that need
/// no quoting beyond backticks are accepted.
pub(crate) fn check_database_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidUrl(format!(
            "`{name}` is not a database name this tool will create (use [A-Za-z0-9_], at most 64)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_url_splits_into_server_and_database() {
        assert_eq!(
            split_database_url("mysql://u:p@127.0.0.1:13306/seckill").unwrap(),
            (
                "mysql://u:p@127.0.0.1:13306".to_owned(),
                Some("seckill".to_owned())
            )
        );
        assert_eq!(
            split_database_url("mysql://u:p@h:1/db?prefer_socket=false").unwrap(),
            (
                "mysql://u:p@h:1?prefer_socket=false".to_owned(),
                Some("db".to_owned())
            )
        );
        assert_eq!(
            split_database_url("mysql://u:p@h:1").unwrap(),
            ("mysql://u:p@h:1".to_owned(), None)
        );
        assert_eq!(
            split_database_url("mysql://u:p@h:1/").unwrap(),
            ("mysql://u:p@h:1".to_owned(), None)
        );
    }

    #[test]
    fn urls_that_are_not_mysql_or_name_odd_databases_are_refused() {
        for bad in [
            "postgres://h/db",
            "mysql:///db",
            "mysql://h/db`; DROP",
            "mysql://h/a-b",
        ] {
            assert!(split_database_url(bad).is_err(), "{bad} was accepted");
        }
    }
}
