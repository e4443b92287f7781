use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use domain::{OrderPlaced, OrderToken, ProductId, UserId};
use order_store::{Db, NewProduct};
use test_support::mysql::TestDb;

pub const RESERVED_AT_MS: i64 = 1_780_000_000_123;

/// An order message for `quantity` units of `product` with a fresh token.
pub fn order(product: u64, user: u64, quantity: u32) -> OrderPlaced {
    OrderPlaced::new(
        OrderToken::random(ProductId(product)),
        UserId(user),
        quantity,
        RESERVED_AT_MS,
    )
}

pub fn new_product(id: u64, stock: i64) -> NewProduct {
    NewProduct {
        id: ProductId(id),
        name: format!("product {id}"),
        initial_stock: stock,
        per_user_limit: 2,
        starts_at: None,
        ends_at: None,
    }
}

pub async fn put_product(db: &Db, id: u64, stock: i64) {
    db.put_product(&new_product(id, stock), false)
        .await
        .unwrap();
}

/// [`put_product`] with a price of `price_cents` per unit.
pub async fn put_priced_product(db: &Db, id: u64, stock: i64, price_cents: u64) {
    db.put_priced_product(&new_product(id, stock), price_cents, false)
        .await
        .unwrap();
}

/// A direct connection, for what the store deliberately cannot do (break invariants).
pub async fn raw_conn(test_db: &TestDb) -> AsyncMysqlConnection {
    AsyncMysqlConnection::establish(test_db.url())
        .await
        .unwrap()
}

pub async fn exec(test_db: &TestDb, sql: &str) {
    let mut conn = raw_conn(test_db).await;
    diesel::sql_query(sql).execute(&mut conn).await.unwrap();
}

/// Rows of `table` in the test database.
pub async fn count(test_db: &TestDb, table: &str) -> i64 {
    use diesel::dsl::sql;
    use diesel::sql_types::BigInt;

    let mut conn = raw_conn(test_db).await;
    diesel::select(sql::<BigInt>(&format!("(SELECT COUNT(*) FROM `{table}`)")))
        .get_result(&mut conn)
        .await
        .unwrap()
}
