//! Schema migrations: the SQL in the repository's `migrations/`, embedded in the binary.
//!
//! Every replica runs [`migrate`] as it starts, so two may start at once: the runner holds
//! the MySQL named lock `seckill_migrations` on its own connection for the whole run, and
//! the second one waits, then finds nothing pending. diesel's runner is synchronous; it
//! runs on a blocking thread through diesel-async's `AsyncConnectionWrapper`.

use std::time::Duration;

use diesel::dsl::sql;
use diesel::sql_types::{BigInt, Nullable};
use diesel_async::AsyncMysqlConnection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use crate::db::split_database_url;
use crate::error::{Result, StoreError};
use crate::settings::Endpoint;

/// One migration per table and one statement per file: MySQL commits each DDL statement
/// by itself, so a migration with several could fail half-applied with no way back.
pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations");

const LOCK_NAME: &str = "seckill_migrations";
const LOCK_WAIT: Duration = Duration::from_secs(60);

type SyncConn = AsyncConnectionWrapper<AsyncMysqlConnection>;

/// Applies every pending migration to the database at `endpoint` (a URL, or
/// [`MysqlSettings::endpoint`](crate::MysqlSettings::endpoint) for TLS), under the
/// migration lock. Returns the versions it applied (none when another process got there
/// first).
pub async fn migrate(endpoint: impl Into<Endpoint>) -> Result<Vec<String>> {
    let endpoint = endpoint.into();
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        // Connected on this runtime, as the wrapper's own `establish` would.
        let conn = runtime
            .block_on(endpoint.connect())
            .map_err(StoreError::Connect)?;
        let mut conn = SyncConn::from(conn);
        with_migration_lock(&mut conn, |conn| {
            conn.run_pending_migrations(MIGRATIONS)
                .map(|versions| versions.iter().map(ToString::to_string).collect())
                .map_err(StoreError::Migration)
        })
    })
    .await?
}

/// Creates the database that `url` names unless it exists (utf8mb4). The server must
/// accept the URL's user without a database.
pub async fn create_database(url: &str) -> Result<()> {
    use diesel_async::{AsyncConnection, RunQueryDsl};

    let (server, database) = split_database_url(url)?;
    let database =
        database.ok_or_else(|| StoreError::InvalidUrl("the URL names no database".into()))?;
    let mut conn = AsyncMysqlConnection::establish(&server)
        .await
        .map_err(StoreError::Connect)?;
    // DDL takes no bind parameters; split_database_url admitted only [A-Za-z0-9_].
    diesel::sql_query(format!(
        "CREATE DATABASE IF NOT EXISTS `{database}` \
         CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
    ))
    .execute(&mut conn)
    .await?;
    Ok(())
}

/// Runs `f` while holding the migration lock on `conn`, and lets go of it whatever `f`
/// returns (closing the connection would too, but the caller may keep it).
pub fn with_migration_lock<T>(
    conn: &mut SyncConn,
    f: impl FnOnce(&mut SyncConn) -> Result<T>,
) -> Result<T> {
    use diesel::RunQueryDsl;

    let locked: Option<i64> = diesel::select(sql::<Nullable<BigInt>>(&format!(
        "GET_LOCK('{LOCK_NAME}', {})",
        LOCK_WAIT.as_secs()
    )))
    .get_result(conn)?;
    if locked != Some(1) {
        return Err(StoreError::MigrationLockTimeout(LOCK_WAIT));
    }
    let result = f(conn);
    let released = diesel::select(sql::<Nullable<BigInt>>(&format!(
        "RELEASE_LOCK('{LOCK_NAME}')"
    )))
    .get_result::<Option<i64>>(conn);
    let value = result?;
    released?;
    Ok(value)
}
