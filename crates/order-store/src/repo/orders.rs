//! The consumer's write path and the order reads.

use std::collections::{BTreeMap, HashSet};

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use domain::{OrderPlaced, OrderToken, ProductId};
use tracing::debug;

use super::{CHUNK, count_star, millis_to_datetime};
use crate::db::Db;
use crate::error::{Result, StoreError, is_write_race};
use crate::models::{
    NewOrder, NewStockFlow, ORDER_CONFIRMED, OrderRow, RawOrder, StockOp, WriteSummary,
};
use crate::schema::{orders, product_stock, stock_flow};

/// How often a batch is re-run when a concurrent writer got to the same order tokens first
/// (or the two deadlocked). Each retry sees the other's commit, so one is normally enough;
/// past this the caller gets a retryable error and the broker's backoff takes over.
const WRITE_ATTEMPTS: u32 = 4;

impl Db {
    /// Writes a batch of order messages in one transaction: orders not yet present are
    /// inserted, their stock deducted, and their `stock_flow` rows written; orders already
    /// present (a redelivery, or a repeat within the batch) are counted and left alone.
    ///
    /// Stock is taken with one conditional update per product (`stock >= n`). If any
    /// product lacks the units, nothing of the batch is written and the error is
    /// [`StoreError::InsufficientStock`] — the same batch would fail again, so it is not
    /// retryable.
    pub async fn write_orders(&self, batch: &[OrderPlaced]) -> Result<WriteSummary> {
        let orders = prepare(batch)?;
        if orders.is_empty() {
            return Ok(WriteSummary {
                inserted: 0,
                duplicates: batch.len(),
            });
        }
        let mut pooled = self.conn().await?;
        let conn: &mut AsyncMysqlConnection = &mut pooled;
        let mut attempt = 1;
        loop {
            let written = conn
                .transaction(async |conn| write_new_orders(conn, &orders).await)
                .await;
            match written {
                Ok(inserted) => {
                    return Ok(WriteSummary {
                        inserted,
                        duplicates: batch.len() - inserted,
                    });
                }
                Err(StoreError::Query(e)) if is_write_race(&e) => {
                    if attempt >= WRITE_ATTEMPTS {
                        return Err(StoreError::Conflict {
                            attempts: attempt,
                            last: e,
                        });
                    }
                    debug!(attempt, error = %e, "Order batch raced another writer; retrying.");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub async fn order(&self, token: &OrderToken) -> Result<Option<OrderRow>> {
        let mut conn = self.conn().await?;
        let raw = orders::table
            .filter(orders::order_token.eq(token.to_string()))
            .select(RawOrder::as_select())
            .first(&mut conn)
            .await
            .optional()?;
        Ok(raw.map(|raw| raw.into_row(token.clone())))
    }
}

/// Checks every message, keeps the first of each token, and orders them by token: two
/// batches that share tokens then insert them in the same order, which keeps them from
/// deadlocking on each other's unique-key locks.
fn prepare(batch: &[OrderPlaced]) -> Result<Vec<NewOrder>> {
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
        orders.push(NewOrder {
            order_token,
            user_id: message.user_id.get(),
            product_id: message.product_id.get(),
            quantity: message.quantity,
            status: ORDER_CONFIRMED,
            reserved_at: millis_to_datetime(message.reserved_at_ms)?,
        });
    }
    orders.sort_by(|a, b| a.order_token.cmp(&b.order_token));
    Ok(orders)
}

/// One attempt, inside the caller's transaction; returns how many orders it wrote.
async fn write_new_orders(conn: &mut AsyncMysqlConnection, orders: &[NewOrder]) -> Result<usize> {
    let mut present = HashSet::new();
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
    let new: Vec<NewOrder> = orders
        .iter()
        .filter(|o| !present.contains(&o.order_token))
        .cloned()
        .collect();
    if new.is_empty() {
        return Ok(0);
    }

    for chunk in new.chunks(CHUNK) {
        diesel::insert_into(orders::table)
            .values(chunk)
            .execute(conn)
            .await?;
        let flows: Vec<NewStockFlow<'_>> = chunk
            .iter()
            .map(|o| NewStockFlow {
                order_token: &o.order_token,
                product_id: o.product_id,
                quantity: o.quantity as i32, // checked in prepare()
                op_type: StockOp::Seckill.as_str(),
            })
            .collect();
        diesel::insert_into(stock_flow::table)
            .values(flows)
            .execute(conn)
            .await?;
    }

    // The hot row last, so its lock is held only from here to the commit. Products in id
    // order, so that two batches never wait on each other in a cycle.
    let mut wanted: BTreeMap<u64, i64> = BTreeMap::new();
    for order in &new {
        *wanted.entry(order.product_id).or_default() += i64::from(order.quantity);
    }
    for (&product_id, &units) in &wanted {
        take_stock(conn, product_id, units).await?;
    }
    Ok(new.len())
}

/// The conditional decrement: never a read-then-write, never a version-retry loop on the
/// hot row. Zero rows touched means not enough stock — or no such product.
pub(crate) async fn take_stock(
    conn: &mut AsyncMysqlConnection,
    product_id: u64,
    units: i64,
) -> Result<()> {
    let updated = diesel::update(
        product_stock::table
            .find(product_id)
            .filter(product_stock::stock.ge(units)),
    )
    .set((
        product_stock::stock.eq(product_stock::stock - units),
        product_stock::version.eq(product_stock::version + 1),
    ))
    .execute(conn)
    .await?;
    if updated == 1 {
        return Ok(());
    }
    let exists = product_stock::table
        .find(product_id)
        .select(count_star())
        .get_result::<i64>(conn)
        .await?
        > 0;
    Err(if exists {
        StoreError::InsufficientStock {
            product_id: ProductId(product_id),
            wanted: units,
        }
    } else {
        StoreError::UnknownProduct(ProductId(product_id))
    })
}
