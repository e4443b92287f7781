//! A database per test: `seckill_t_<random hex>` on the server at `SECKILL_TEST_MYSQL_URL`
//! (default `mysql://seckill:seckill@127.0.0.1:13306`, the local stack's MariaDB), dropped
//! when the [`TestDb`] is.

use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use order_store::Db;

const DEFAULT_SERVER_URL: &str = "mysql://seckill:seckill@127.0.0.1:13306";
/// Enough for a test that runs a few writers at once; the server is shared by every test.
const POOL_SIZE: usize = 4;

pub struct TestDb {
    /// The server without a database, for the DROP at the end.
    server_url: String,
    name: String,
    url: String,
    db: Db,
}

impl std::fmt::Debug for TestDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDb").field("name", &self.name).finish()
    }
}

impl TestDb {
    /// A new database with every migration applied. Panics when the server cannot be
    /// reached: a test without its database cannot say anything useful.
    pub async fn create() -> Self {
        Self::create_on(&server_url_from_env()).await
    }

    /// A new, empty database: for tests of the migrations themselves.
    pub async fn create_unmigrated() -> Self {
        Self::create_unmigrated_on(&server_url_from_env()).await
    }

    /// [`TestDb::create`] on another server than `SECKILL_TEST_MYSQL_URL`'s, e.g. the fault
    /// drills' own MariaDB. `server_url` names no database.
    pub async fn create_on(server_url: &str) -> Self {
        let test_db = Self::create_unmigrated_on(server_url).await;
        order_store::migrate(&test_db.url)
            .await
            .unwrap_or_else(|e| panic!("migrating {}: {}", test_db.name, chain(&e)));
        test_db
    }

    /// [`TestDb::create_unmigrated`] on the server at `server_url`.
    pub async fn create_unmigrated_on(server_url: &str) -> Self {
        let server_url = server_url.trim_end_matches('/').to_owned();
        let name = format!("seckill_t_{:016x}", rand::random::<u64>());
        let url = with_database(&server_url, &name);
        order_store::create_database(&url).await.unwrap_or_else(|e| {
            panic!(
                "creating test database {name} (is the local MariaDB up? `bash deploy/local/stack.sh up`): {}",
                chain(&e)
            )
        });
        let db = Db::connect(&url, POOL_SIZE).expect("a pool for the test database");
        Self {
            server_url,
            name,
            url,
            db,
        }
    }

    /// `mysql://…/seckill_t_…`, for code under test that connects by itself.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn db(&self) -> &Db {
        &self.db
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        self.db.close();
        let server_url = self.server_url.clone();
        let name = self.name.clone();
        // Drop runs inside the test's runtime, which cannot be blocked on; a thread with
        // its own small runtime can, and joining it means the database is gone when the
        // test ends.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let mut conn = AsyncMysqlConnection::establish(&server_url)
                    .await
                    .map_err(|e| e.to_string())?;
                diesel::sql_query(format!("DROP DATABASE IF EXISTS `{name}`"))
                    .execute(&mut conn)
                    .await
                    .map_err(|e| e.to_string())
            })
        })
        .join();
        match dropped {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("test-support: could not drop database {}: {e}", self.name),
            Err(_) => eprintln!("test-support: dropping database {} panicked", self.name),
        }
    }
}

/// `SECKILL_TEST_MYSQL_URL`, or the local stack's MariaDB.
pub fn server_url_from_env() -> String {
    std::env::var("SECKILL_TEST_MYSQL_URL").unwrap_or_else(|_| DEFAULT_SERVER_URL.to_owned())
}

/// `server_url` with `database` as its path, keeping any `?options` at the end.
fn with_database(server_url: &str, database: &str) -> String {
    match server_url.split_once('?') {
        Some((server, options)) => format!("{server}/{database}?{options}"),
        None => format!("{server_url}/{database}"),
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
