use diesel::Connection;
use diesel::dsl::sql;
use diesel::sql_types::BigInt;
use diesel_async::AsyncMysqlConnection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::{AsyncConnection, RunQueryDsl};
use diesel_migrations::MigrationHarness;
use order_store::migrate::with_migration_lock;
use test_support::mysql::TestDb;

const TABLES: i64 = 10;
/// One per table created, and one per table altered since.
const MIGRATIONS: i64 = 13;

async fn tables(test_db: &TestDb) -> i64 {
    let mut conn = AsyncMysqlConnection::establish(test_db.url())
        .await
        .unwrap();
    diesel::select(sql::<BigInt>(
        "(SELECT COUNT(*) FROM information_schema.tables \
          WHERE table_schema = DATABASE() AND table_name <> '__diesel_schema_migrations')",
    ))
    .get_result(&mut conn)
    .await
    .unwrap()
}

async fn revert_all(url: &str) -> usize {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut conn =
            <AsyncConnectionWrapper<AsyncMysqlConnection> as Connection>::establish(&url).unwrap();
        with_migration_lock(&mut conn, |conn| {
            Ok(conn
                .revert_all_migrations(order_store::MIGRATIONS)
                .unwrap()
                .len())
        })
        .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn migrations_run_up_and_down_cleanly() {
    let test_db = TestDb::create_unmigrated().await;

    let applied = order_store::migrate(test_db.url()).await.unwrap();
    assert_eq!(applied.len() as i64, MIGRATIONS);
    assert_eq!(tables(&test_db).await, TABLES);

    assert_eq!(revert_all(test_db.url()).await as i64, MIGRATIONS);
    assert_eq!(tables(&test_db).await, 0, "a down.sql left a table behind");

    let reapplied = order_store::migrate(test_db.url()).await.unwrap();
    assert_eq!(reapplied, applied);
    assert_eq!(tables(&test_db).await, TABLES);
    assert!(
        order_store::migrate(test_db.url())
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_migrating_at_once_apply_each_migration_once() {
    let test_db = TestDb::create_unmigrated().await;

    let (first, second) = tokio::join!(
        order_store::migrate(test_db.url()),
        order_store::migrate(test_db.url())
    );
    let (first, second) = (first.unwrap(), second.unwrap());

    // One did all the work, the other waited on the lock and found nothing pending.
    assert_eq!((first.len() + second.len()) as i64, MIGRATIONS);
    assert!(first.is_empty() || second.is_empty());
    assert_eq!(tables(&test_db).await, TABLES);
}

#[tokio::test]
async fn a_migrated_database_answers_a_ping() {
    let test_db = TestDb::create().await;
    test_db.db().ping().await.unwrap();
}
