//! The [`Db`] handle: a pool of async MySQL connections that every repository method
//! borrows one connection from for the length of one call (one transaction at most).

use std::fmt;
use std::time::Duration;

use diesel::sql_types::Integer;
use diesel_async::AsyncMysqlConnection;
use diesel_async::RunQueryDsl;
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::pooled_connection::deadpool::{Object, Pool};

use crate::error::{Result, StoreError};

/// How long a caller waits for a free connection (or a new one to be made) before the
/// call fails as retryable. deadpool itself would wait for ever without a runtime-bound
/// timeout; a consumer stuck there holds its messages hostage.
const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) type Conn = Object<AsyncMysqlConnection>;

/// A cheap-to-clone handle on the order database.
#[derive(Clone)]
pub struct Db {
    /// The connections; deadpool hands each out to one caller at a time.
    pool: Pool<AsyncMysqlConnection>,
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
    /// Builds a pool of at most `pool_size` connections to `url`
    /// (`mysql://user:password@host:port/database`). Connections are made lazily, so this
    /// succeeds while the database is down; call [`Db::ping`] to find out.
    pub fn connect(url: &str, pool_size: usize) -> Result<Self> {
        if pool_size == 0 {
            return Err(StoreError::InvalidData(
                "the pool size must be at least 1".into(),
            ));
        }
        let manager = AsyncDieselConnectionManager::<AsyncMysqlConnection>::new(url);
        let pool = Pool::builder(manager)
            .max_size(pool_size)
            .build()
            .map_err(|e| StoreError::InvalidUrl(e.to_string()))?;
        Ok(Self {
            pool,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
        })
    }

    /// The same pool, with another limit on the wait for a connection.
    pub fn with_acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// One round trip: the database answers (readiness probes).
    pub async fn ping(&self) -> Result<()> {
        let mut conn = self.conn().await?;
        diesel::select(diesel::dsl::sql::<Integer>("1"))
            .get_result::<i32>(&mut conn)
            .await?;
        Ok(())
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
