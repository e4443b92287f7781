//! The pool's checkout: no test query for a connection in steady use, yet a connection the
//! server has closed is never lent out for good.

use std::time::{Duration, Instant};

use diesel::dsl::sql;
use diesel::sql_types::{BigInt, Unsigned};
use diesel_async::RunQueryDsl;
use domain::ProductId;
use order_store::Db;
use test_support::mysql::TestDb;

use crate::helpers::{put_product, raw_conn};

/// Kills every session the server has open on the test database but the killer's own:
/// what a restart of MariaDB (or an operator's KILL) does to the pool's connections.
///
/// Waits first until the pool's one connection is the only session left: the server lists
/// a closed connection (the migration's, the set-up's) for a moment after its client has
/// gone, and on a busy host that moment was long enough to be counted and killed too. The
/// wait and the listing share one connection, so no connection of the wait's own is closed
/// just before the listing and counted in its turn.
async fn kill_pool_sessions(test_db: &TestDb) -> usize {
    let mut conn = raw_conn(test_db).await;
    let waited_since = Instant::now();
    let ids = loop {
        let ids = other_sessions(&mut conn, test_db).await;
        if ids.len() == 1 || waited_since.elapsed() > SESSIONS_LEAVE_WITHIN {
            break ids;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for id in &ids {
        diesel::sql_query(format!("KILL {id}"))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    ids.len()
}

/// How long the set-up's closed sessions may stay in the server's process list.
const SESSIONS_LEAVE_WITHIN: Duration = Duration::from_secs(10);

/// The ids of the sessions on the test database other than `conn`'s own.
async fn other_sessions(
    conn: &mut diesel_async::AsyncMysqlConnection,
    test_db: &TestDb,
) -> Vec<u64> {
    diesel::sql_query(format!(
        "SELECT id FROM information_schema.processlist \
         WHERE db = '{}' AND id <> CONNECTION_ID()",
        test_db.name()
    ))
    .load::<Id>(conn)
    .await
    .unwrap()
    .into_iter()
    .map(|row| row.id)
    .collect()
}

#[derive(diesel::QueryableByName)]
struct Id {
    #[diesel(sql_type = Unsigned<BigInt>)]
    id: u64,
}

async fn sessions(test_db: &TestDb) -> i64 {
    let mut conn = raw_conn(test_db).await;
    diesel::select(sql::<BigInt>(&format!(
        "(SELECT COUNT(*) FROM information_schema.processlist \
          WHERE db = '{}' AND id <> CONNECTION_ID())",
        test_db.name()
    )))
    .get_result(&mut conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_connection_killed_while_in_use_fails_one_call_and_is_then_replaced() {
    let test_db = TestDb::create().await;
    let db = Db::connect(test_db.url(), 1).unwrap();
    put_product(&db, 1, 10).await;
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));
    assert_eq!(kill_pool_sessions(&test_db).await, 1);

    // Used a moment ago, so lent out without a test query: the call on it fails, as any
    // call on a connection lost mid-use does, and retryably.
    if let Err(error) = db.stock(ProductId(1)).await {
        assert!(error.is_retryable(), "{error:?}");
    }
    // It is not lent out again: the next calls get a new connection.
    for _ in 0..3 {
        assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(10));
    }
    let summary = db
        .write_orders(&[crate::helpers::order(1, 100, 1)])
        .await
        .unwrap();
    assert_eq!(summary.stock_left, [(ProductId(1), 9)]);
    assert_eq!(sessions(&test_db).await, 1);
    db.close();
}

#[tokio::test]
async fn an_idle_connection_is_checked_before_it_is_lent_out() {
    let test_db = TestDb::create().await;
    let db = Db::connect(test_db.url(), 1).unwrap();
    put_product(&db, 1, 10).await;
    assert_eq!(kill_pool_sessions(&test_db).await, 1);
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    // Idle past the threshold: the checkout's test query finds it dead, and the caller
    // gets a new connection without ever seeing the old one fail.
    let summary = db
        .write_orders(&[crate::helpers::order(1, 100, 2)])
        .await
        .unwrap();
    assert_eq!(summary.stock_left, [(ProductId(1), 8)]);
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(8));
    db.close();
}

#[tokio::test]
async fn a_statement_refused_for_its_data_keeps_the_connection() {
    let test_db = TestDb::create().await;
    let db = Db::connect(test_db.url(), 1).unwrap();
    put_product(&db, 1, 10).await;
    let first = crate::helpers::order(1, 100, 1);
    db.write_orders(std::slice::from_ref(&first)).await.unwrap();
    let before = session_ids(&test_db).await;

    // A redelivery: the first attempt's INSERT hits the unique key (a statement-level
    // error), the next one skips the order. Neither loses the connection.
    let again = db.write_orders(&[first]).await.unwrap();
    assert_eq!((again.inserted, again.duplicates), (0, 1));
    assert!(
        db.write_orders(&[crate::helpers::order(1, 101, 20)])
            .await
            .is_err()
    );
    assert_eq!(db.stock(ProductId(1)).await.unwrap(), Some(9));

    // The pool's session is still the one it had: no session was opened in its place. (A
    // connection closed just before `before` was read may still be listed then and gone
    // now, so the sessions after are a subset of those before, not equal to them.)
    let after = session_ids(&test_db).await;
    assert!(
        !after.is_empty() && after.iter().all(|id| before.contains(id)),
        "sessions before {before:?}, after {after:?}"
    );
    db.close();
}

async fn session_ids(test_db: &TestDb) -> Vec<u64> {
    let mut conn = raw_conn(test_db).await;
    diesel::sql_query(format!(
        "SELECT id FROM information_schema.processlist \
         WHERE db = '{}' AND id <> CONNECTION_ID() ORDER BY id",
        test_db.name()
    ))
    .load::<Id>(&mut conn)
    .await
    .unwrap()
    .into_iter()
    .map(|row| row.id)
    .collect()
}
