//! The consumer's write path and the order reads.
//!
//! `write_orders` per batch, in the common case (every order new, one product), on one
//! pooled connection: `BEGIN`; one text-protocol round trip carrying both multi-row
//! INSERTs; the conditional stock UPDATE; the primary-key read of the stock it left;
//! `COMMIT` — five round trips. Why each is there is said where it is issued. What is
//! left out on purpose: a `SELECT 1` on checkout (see `db::recycle`), a read of which
//! tokens already exist before inserting (the unique key answers that, see
//! [`Db::write_orders`]), and the prepare/close of a server-side statement for each
//! INSERT and the UPDATE (diesel never caches a multi-row INSERT or any UPDATE, so each
//! would cost a `COM_STMT_PREPARE` round trip before its execute).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, SubsecRound, Utc};
use diesel::mysql::Mysql;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Datetime, Integer, Unsigned, Varchar};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl, SimpleAsyncConnection};
use domain::{OrderPlaced, OrderToken, ProductId};
use tracing::debug;

use super::{CHUNK, millis_to_datetime, to_datetime};
use crate::db::Db;
use crate::error::{Result, StoreError, is_write_race};
use crate::models::{
    NewOrder, ORDER_CONFIRMED, OrderRow, RawOrder, RawUnwritableOrder, StockOp, UnwritableOrderRow,
    WriteSummary, truncate_chars,
};
use crate::schema::{orders, product_stock, unwritable_order};

// VALUES() rather than a row alias: MariaDB has no row alias (as in `lease`).
const RECORD_UNWRITABLE: &str = "\
    INSERT INTO unwritable_order \
        (order_token, product_id, user_id, quantity, reserved_at, msg_id, reason) \
    VALUES (?, ?, ?, ?, ?, ?, ?) \
    ON DUPLICATE KEY UPDATE \
        refusals = refusals + 1, \
        msg_id = VALUES(msg_id), \
        reason = VALUES(reason), \
        last_refused_at = CURRENT_TIMESTAMP(3)";

/// How often a batch is run at most. The first attempt assumes every order is new; a
/// unique-key collision (a redelivery, or a concurrent writer that got to the same tokens
/// first) or a deadlock sends it round again, now reading which orders exist. Each retry
/// sees the other's commit, so one is normally enough; past this the caller gets a
/// retryable error and the broker's backoff takes over.
const WRITE_ATTEMPTS: u32 = 5;

/// The payment window [`Db::write_orders`] gives an order when its caller names no
/// deadline: long enough to pay with a card and a bank's confirmation step, short enough
/// that unpaid units go back to the sale while it is still on. Callers that know the
/// configured window use [`Db::write_orders_due`].
pub const DEFAULT_PAYMENT_WINDOW: Duration = Duration::from_secs(900);

impl Db {
    /// [`Db::write_orders_due`] with `pay_by` [`DEFAULT_PAYMENT_WINDOW`] from now.
    pub async fn write_orders(&self, batch: &[OrderPlaced]) -> Result<WriteSummary> {
        let window = chrono::Duration::from_std(DEFAULT_PAYMENT_WINDOW)
            .expect("the default window fits chrono's range");
        self.write_orders_due(batch, Utc::now() + window).await
    }

    /// Writes a batch of order messages in one transaction: orders not yet present are
    /// inserted (`confirmed`, to be paid by `pay_by`), their stock deducted, and their
    /// `stock_flow` rows written; orders already present (a redelivery, or a repeat within
    /// the batch) are counted and left alone, their deadline too.
    ///
    /// Stock is taken with one conditional update per product (`stock >= n`). If any
    /// product lacks the units, nothing of the batch is written and the error is
    /// [`StoreError::InsufficientStock`] — the same batch would fail again, so it is not
    /// retryable. [`WriteSummary::stock_left`] is the stock each product was left with.
    ///
    /// Idempotency rests on the unique key of `orders.order_token`, not on a prior read:
    /// the first attempt inserts the whole batch, and if any token is already there the
    /// INSERT fails as a whole, the transaction is rolled back and the next attempt reads
    /// which tokens exist and inserts only the others. A redelivered batch pays one
    /// rolled-back attempt; every other batch saves the read.
    pub async fn write_orders_due(
        &self,
        batch: &[OrderPlaced],
        pay_by: DateTime<Utc>,
    ) -> Result<WriteSummary> {
        // To the column's millisecond: MySQL 8 rounds a finer literal and MariaDB cuts it,
        // and the row should say the same deadline on both.
        let orders = prepare(batch, to_datetime(pay_by.trunc_subsecs(3))?)?;
        if orders.is_empty() {
            return Ok(WriteSummary {
                inserted: 0,
                duplicates: batch.len(),
                stock_left: Vec::new(),
            });
        }
        let mut pooled = self.conn().await?;
        let conn: &mut AsyncMysqlConnection = &mut pooled;
        let mut attempt = 1;
        loop {
            let assume_new = attempt == 1;
            // BEGIN … COMMIT (a round trip each): the orders, their stock_flow rows and the
            // deduction become visible together or not at all, so no failure in between
            // can sell a unit without its order or write an order without its unit.
            let written = conn
                .transaction(async |conn| write_new_orders(conn, &orders, assume_new).await)
                .await;
            match written {
                Ok(Written {
                    inserted,
                    stock_left,
                }) => {
                    return Ok(WriteSummary {
                        inserted,
                        duplicates: batch.len() - inserted,
                        stock_left,
                    });
                }
                Err(StoreError::Query(e)) if is_write_race(&e) => {
                    if attempt >= WRITE_ATTEMPTS {
                        return Err(StoreError::Conflict {
                            attempts: attempt,
                            last: e,
                        });
                    }
                    debug!(attempt, error = %e, "Order batch met existing orders or raced another writer; retrying.");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Records an order MySQL refused for good as it stands ([`StoreError::refuses_order`]):
    /// the consumer acknowledges its batch without it, and reconcile reports it unresolved
    /// with `reason` until a person settles it. Recording it again (a redelivery, a
    /// re-publish refused again) counts one more refusal and keeps the latest reason.
    pub async fn record_unwritable_order(
        &self,
        order: &OrderPlaced,
        msg_id: &str,
        reason: &str,
    ) -> Result<()> {
        let reserved_at = millis_to_datetime(order.reserved_at_ms)?;
        let mut conn = self.conn().await?;
        diesel::sql_query(RECORD_UNWRITABLE)
            .bind::<Varchar, _>(order.order_token.to_string())
            .bind::<Unsigned<BigInt>, _>(order.product_id.get())
            .bind::<Unsigned<BigInt>, _>(order.user_id.get())
            .bind::<Unsigned<Integer>, _>(order.quantity)
            .bind::<Datetime, _>(reserved_at)
            .bind::<Varchar, _>(truncate_chars(msg_id, 128))
            .bind::<Varchar, _>(truncate_chars(reason, 500))
            .execute(&mut conn)
            .await?;
        Ok(())
    }

    /// The record of an order MySQL refused, if it was ever refused.
    pub async fn unwritable_order(&self, token: &OrderToken) -> Result<Option<UnwritableOrderRow>> {
        let mut conn = self.conn().await?;
        let raw = unwritable_order::table
            .find(token.to_string())
            .select(RawUnwritableOrder::as_select())
            .first(&mut conn)
            .await
            .optional()?;
        Ok(raw.map(UnwritableOrderRow::from))
    }

    pub async fn order(&self, token: &OrderToken) -> Result<Option<OrderRow>> {
        let mut conn = self.conn().await?;
        let raw = orders::table
            .filter(orders::order_token.eq(token.to_string()))
            .select(RawOrder::as_select())
            .first(&mut conn)
            .await
            .optional()?;
        raw.map(|raw| raw.into_row(token.clone())).transpose()
    }
}

impl StoreError {
    /// True when MySQL refuses the order written, as it stands, however often it is tried:
    /// the conditional stock update cannot succeed (MySQL holds fewer units than the order
    /// takes) or the product has no stock row. Only a person changes that (a restock in
    /// MySQL), so the consumer records such an order ([`Db::record_unwritable_order`]) and
    /// goes on with its batch instead of retrying the batch until the dead-letter queue.
    /// Of a batch written whole, it means that some order of the batch is refused.
    pub fn refuses_order(&self) -> bool {
        matches!(
            self,
            Self::InsufficientStock { .. } | Self::UnknownProduct(_)
        )
    }
}

/// Checks every message, keeps the first of each token, and orders them by token: two
/// batches that share tokens then insert them in the same order, which keeps them from
/// deadlocking on each other's unique-key locks.
fn prepare(batch: &[OrderPlaced], pay_by: NaiveDateTime) -> Result<Vec<NewOrder>> {
    let mut seen = HashSet::with_capacity(batch.len());
    let mut orders = Vec::with_capacity(batch.len());
    for message in batch {
        let order_token = message.order_token.to_string();
        if !seen.insert(order_token.clone()) {
            continue;
        }
        if message.quantity == 0 || i32::try_from(message.quantity).is_err() {
            return Err(StoreError::InvalidData(format!(
                "order {order_token} has quantity {}",
                message.quantity
            )));
        }
        if message.order_token.product_id() != message.product_id {
            return Err(StoreError::InvalidData(format!(
                "order {order_token} names product {}",
                message.product_id
            )));
        }
        // The INSERTs carry the token as a quoted literal (see `insert_sql`). A token is
        // `<product>-<32 hex>`; this keeps that literal safe should the format ever change.
        if !order_token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(StoreError::InvalidData(format!(
                "order token {order_token:?} has characters other than [A-Za-z0-9_-]"
            )));
        }
        orders.push(NewOrder {
            order_token,
            user_id: message.user_id.get(),
            product_id: message.product_id.get(),
            quantity: message.quantity,
            status: ORDER_CONFIRMED,
            reserved_at: millis_to_datetime(message.reserved_at_ms)?,
            pay_by,
        });
    }
    orders.sort_by(|a, b| a.order_token.cmp(&b.order_token));
    Ok(orders)
}

/// What one successful attempt did.
struct Written {
    inserted: usize,
    stock_left: Vec<(ProductId, i64)>,
}

/// One attempt, inside the caller's transaction. With `assume_new`, every order is
/// inserted and a token already present fails the attempt (a unique violation, which the
/// caller answers with an attempt without `assume_new`).
async fn write_new_orders(
    conn: &mut AsyncMysqlConnection,
    orders: &[NewOrder],
    assume_new: bool,
) -> Result<Written> {
    // Which tokens exist: only after the first attempt met one. Redeliveries are rare, so
    // the common batch skips this read; the unique key catches them when it does not.
    let mut present = HashSet::new();
    if !assume_new {
        for chunk in orders.chunks(CHUNK) {
            let tokens: Vec<&str> = chunk.iter().map(|o| o.order_token.as_str()).collect();
            present.extend(
                orders::table
                    .filter(orders::order_token.eq_any(tokens))
                    .select(orders::order_token)
                    .load::<String>(conn)
                    .await?,
            );
        }
    }
    let new: Vec<&NewOrder> = orders
        .iter()
        .filter(|o| !present.contains(&o.order_token))
        .collect();
    if new.is_empty() {
        return Ok(Written {
            inserted: 0,
            stock_left: Vec::new(),
        });
    }

    // The rows: orders and their stock_flow rows, both INSERTs in one round trip.
    for chunk in new.chunks(CHUNK) {
        conn.batch_execute(&insert_sql(chunk)?).await?;
    }

    // The hot row last, so its lock is held only from here to the commit. Products in id
    // order, so that two batches never wait on each other in a cycle.
    let mut wanted: BTreeMap<u64, i64> = BTreeMap::new();
    for order in &new {
        *wanted.entry(order.product_id).or_default() += i64::from(order.quantity);
    }
    let mut stock_left = Vec::with_capacity(wanted.len());
    for (&product_id, &units) in &wanted {
        // The deduction itself, conditional: it is what refuses an oversell.
        take_stock(conn, product_id, units).await?;
        // What it left, for the caller's gauge: read here, under the lock the update took,
        // it is this batch's result — and it spares the caller a connection of its own.
        // (MySQL's UPDATE returns no values, and diesel-async shows only the row count.)
        stock_left.push((ProductId(product_id), stock_of(conn, product_id).await?));
    }
    Ok(Written {
        inserted: new.len(),
        stock_left,
    })
}

/// `INSERT INTO orders …; INSERT INTO stock_flow …` for `chunk`, as one multi-statement
/// text query: one round trip, no server-side statement to prepare and close. (As bound
/// parameters each INSERT's text changes with the row count, so diesel prepares it afresh
/// every time; caching one per row count instead would pile up prepared statements on the
/// server, which caps them.) Every value is a number, a constant, a formatted date or a
/// token `prepare` checked to be `[A-Za-z0-9_-]`, so nothing needs escaping.
///
/// A failing statement (a token already in `orders` or `stock_flow`) stops the query
/// there with its error, and the caller's transaction rolls back whatever ran before it.
fn insert_sql(chunk: &[&NewOrder]) -> Result<String> {
    let fmt_error = |_| StoreError::InvalidData("cannot format the order rows".into());
    let mut sql = String::with_capacity(200 + chunk.len() * 220);
    sql.push_str(
        "INSERT INTO orders \
         (order_token, user_id, product_id, quantity, status, reserved_at, pay_by) VALUES ",
    );
    for (i, o) in chunk.iter().enumerate() {
        if i > 0 {
            sql.push(',');
        }
        write!(
            sql,
            "('{}',{},{},{},'{}','{}','{}')",
            o.order_token,
            o.user_id,
            o.product_id,
            o.quantity,
            o.status,
            o.reserved_at.format("%Y-%m-%d %H:%M:%S%.6f"),
            o.pay_by.format("%Y-%m-%d %H:%M:%S%.6f"),
        )
        .map_err(fmt_error)?;
    }
    sql.push_str(";\nINSERT INTO stock_flow (order_token, product_id, quantity, op_type) VALUES ");
    for (i, o) in chunk.iter().enumerate() {
        if i > 0 {
            sql.push(',');
        }
        write!(
            sql,
            "('{}',{},{},'{}')",
            o.order_token,
            o.product_id,
            o.quantity, // at most i32::MAX, checked in prepare()
            StockOp::Seckill.as_str(),
        )
        .map_err(fmt_error)?;
    }
    Ok(sql)
}

/// `UPDATE product_stock SET stock = stock - ?, version = version + 1
/// WHERE product_id = ? AND stock >= ?` — the same statement diesel's DSL builds, but one
/// diesel may keep prepared: its DSL marks every UPDATE uncacheable (a changeset can skip
/// columns, changing the text), which costs a prepare round trip on each run. This text
/// never changes, so it is prepared once per connection and then executed in one.
#[derive(Debug, Clone, Copy)]
struct TakeStock {
    product_id: u64,
    units: i64,
}

impl QueryId for TakeStock {
    type QueryId = TakeStock;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl QueryFragment<Mysql> for TakeStock {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
        out.push_sql("UPDATE product_stock SET stock = stock - ");
        out.push_bind_param::<BigInt, _>(&self.units)?;
        out.push_sql(", version = version + 1 WHERE product_id = ");
        out.push_bind_param::<Unsigned<BigInt>, _>(&self.product_id)?;
        out.push_sql(" AND stock >= ");
        out.push_bind_param::<BigInt, _>(&self.units)?;
        Ok(())
    }
}

/// The conditional decrement: never a read-then-write, never a version-retry loop on the
/// hot row. Zero rows touched means not enough stock — or no such product.
pub(crate) async fn take_stock(
    conn: &mut AsyncMysqlConnection,
    product_id: u64,
    units: i64,
) -> Result<()> {
    let updated = TakeStock { product_id, units }.execute(conn).await?;
    if updated == 1 {
        return Ok(());
    }
    let exists = product_stock::table
        .find(product_id)
        .select(product_stock::product_id)
        .first::<u64>(conn)
        .await
        .optional()?
        .is_some();
    Err(if exists {
        StoreError::InsufficientStock {
            product_id: ProductId(product_id),
            wanted: units,
        }
    } else {
        StoreError::UnknownProduct(ProductId(product_id))
    })
}

/// The stock row's units: a primary-key read, a statement diesel keeps prepared.
async fn stock_of(conn: &mut AsyncMysqlConnection, product_id: u64) -> Result<i64> {
    Ok(product_stock::table
        .find(product_id)
        .select(product_stock::stock)
        .first::<i64>(conn)
        .await?)
}
