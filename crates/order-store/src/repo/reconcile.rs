//! What reconcile reads (always in batches, never a query per token) and the repairs and
//! records it writes.

use std::collections::HashMap;

use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Unsigned};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use domain::{OrderStatus, OrderToken, ProductId, UserId};

use super::orders::take_stock;
use super::{CHUNK, HOLDS_UNITS, count_star};
use crate::db::Db;
use crate::error::{Result, StoreError};
use crate::models::{
    DiscrepancyRecord, DiscrepancyRow, NewDiscrepancy, NewStockFlow, OrderFacts, OrderPageRow,
    RawDiscrepancy, RawRun, RawUnwritableOrder, ReleasedPaidOrder, RunRow, RunStatus, StockOp,
    UnwritableOrderRow, parse_status, truncate_chars,
};
use crate::schema::{orders, reconcile_discrepancy, reconcile_run, stock_flow, unwritable_order};

impl Db {
    /// The orders of `product` among `tokens`, with their status and whether each has the
    /// stock_flow row that took its stock. Tokens with no order are absent from the map.
    /// One query per 1000 tokens.
    pub async fn orders_for_tokens(
        &self,
        product: ProductId,
        tokens: &[OrderToken],
    ) -> Result<HashMap<OrderToken, OrderFacts>> {
        let mut facts = HashMap::with_capacity(tokens.len());
        if tokens.is_empty() {
            return Ok(facts);
        }
        let mut conn = self.conn().await?;
        for chunk in tokens.chunks(CHUNK) {
            let asked = by_text(chunk);
            let rows = orders::table
                .left_join(stock_flow::table.on(takes_for_order()))
                .filter(orders::product_id.eq(product.get()))
                .filter(orders::order_token.eq_any(asked.keys()))
                .select((
                    orders::order_token,
                    orders::quantity,
                    orders::status,
                    stock_flow::id.nullable().is_not_null(),
                ))
                .load::<(String, u32, String, bool)>(&mut conn)
                .await?;
            for (text, quantity, status, has_stock_flow) in rows {
                let Some(&token) = asked.get(&text) else {
                    continue;
                };
                let facts_of_order = OrderFacts {
                    quantity,
                    status: parse_status(&status)?,
                    has_stock_flow,
                };
                facts.insert(token.clone(), facts_of_order);
            }
        }
        Ok(facts)
    }

    /// The records of the orders among `tokens` that MySQL refused
    /// ([`Db::record_unwritable_order`]), by token. One query per 1000 tokens.
    pub async fn unwritable_orders_for_tokens(
        &self,
        product: ProductId,
        tokens: &[OrderToken],
    ) -> Result<HashMap<OrderToken, UnwritableOrderRow>> {
        let mut found = HashMap::new();
        if tokens.is_empty() {
            return Ok(found);
        }
        let mut conn = self.conn().await?;
        for chunk in tokens.chunks(CHUNK) {
            let asked = by_text(chunk);
            let rows = unwritable_order::table
                .filter(unwritable_order::product_id.eq(product.get()))
                .filter(unwritable_order::order_token.eq_any(asked.keys()))
                .select(RawUnwritableOrder::as_select())
                .load(&mut conn)
                .await?;
            found.extend(
                rows.into_iter()
                    .map(UnwritableOrderRow::from)
                    .filter_map(|row| {
                        let token = (*asked.get(&row.order_token)?).clone();
                        Some((token, row))
                    }),
            );
        }
        Ok(found)
    }

    /// Up to `limit` orders of `product` with `id > after_id`, in id order (keyset
    /// pagination: start at 0, continue from the last row's id, stop at an empty page).
    /// Each row carries its status, and whether its stock was taken and given back.
    pub async fn orders_page(
        &self,
        product: ProductId,
        after_id: u64,
        limit: u32,
    ) -> Result<Vec<OrderPageRow>> {
        // The take and the give-back are the same table met twice, once per direction;
        // each join meets at most one row, by the unique key (order_token, gives_back).
        let (take, release) = diesel::alias!(stock_flow as take, stock_flow as release);
        let mut conn = self.conn().await?;
        let rows = orders::table
            .left_join(
                take.on(take
                    .field(stock_flow::order_token)
                    .eq(orders::order_token)
                    .and(take.field(stock_flow::gives_back).eq(false))),
            )
            .left_join(
                release.on(release
                    .field(stock_flow::order_token)
                    .eq(orders::order_token)
                    .and(release.field(stock_flow::gives_back).eq(true))),
            )
            .filter(orders::product_id.eq(product.get()))
            .filter(orders::id.gt(after_id))
            .order(orders::id.asc())
            .limit(i64::from(limit))
            .select((
                orders::id,
                orders::order_token,
                orders::user_id,
                orders::quantity,
                orders::reserved_at,
                orders::status,
                orders::pay_by,
                take.field(stock_flow::id).nullable().is_not_null(),
                release.field(stock_flow::id).nullable().is_not_null(),
            ))
            .load::<(
                u64,
                String,
                u64,
                u32,
                chrono::NaiveDateTime,
                String,
                Option<chrono::NaiveDateTime>,
                bool,
                bool,
            )>(&mut conn)
            .await?;
        rows.into_iter()
            .map(
                |(
                    id,
                    order_token,
                    user_id,
                    quantity,
                    reserved_at,
                    status,
                    pay_by,
                    take,
                    release,
                )| {
                    Ok(OrderPageRow {
                        id,
                        order_token,
                        user_id: UserId(user_id),
                        quantity,
                        reserved_at_ms: reserved_at.and_utc().timestamp_millis(),
                        status: parse_status(&status)?,
                        pay_by_ms: pay_by.map(|t| t.and_utc().timestamp_millis()),
                        has_stock_flow: take,
                        has_release: release,
                    })
                },
            )
            .collect()
    }

    /// Up to `limit` paid orders of `product` with `id > after_id` that a RELEASE row gave
    /// their stock back, in id order (keyset pagination, as [`Db::orders_page`]). Only a
    /// cancel or an expiry writes a RELEASE, in the transaction that ends the order, so a
    /// paid one should never have it. Read on its own rather than from the pages of every
    /// order: those are read only when some order has no flow.
    pub async fn paid_orders_released(
        &self,
        product: ProductId,
        after_id: u64,
        limit: u32,
    ) -> Result<Vec<ReleasedPaidOrder>> {
        let mut conn = self.conn().await?;
        let rows = orders::table
            .inner_join(
                stock_flow::table.on(stock_flow::order_token
                    .eq(orders::order_token)
                    .and(stock_flow::gives_back.eq(true))),
            )
            .filter(orders::product_id.eq(product.get()))
            .filter(orders::status.eq(OrderStatus::Paid.as_str()))
            .filter(orders::id.gt(after_id))
            .order(orders::id.asc())
            .limit(i64::from(limit))
            .select((
                orders::id,
                orders::order_token,
                orders::quantity,
                stock_flow::quantity,
            ))
            .load::<(u64, String, u32, i32)>(&mut conn)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, order_token, quantity, released)| ReleasedPaidOrder {
                id,
                order_token,
                quantity,
                released: -i64::from(released),
            })
            .collect())
    }

    /// Net units that `stock_flow` took from the product's stock (releases count negative).
    pub async fn stock_flow_units(&self, product: ProductId) -> Result<i64> {
        let mut conn = self.conn().await?;
        Ok(stock_flow::table
            .filter(stock_flow::product_id.eq(product.get()))
            .select(super::sum_quantity())
            .get_result(&mut conn)
            .await?)
    }

    /// Deducts the stock of an order that has none recorded (reconcile's repair for
    /// "stock not deducted"): one transaction writes its RECONCILE_DEDUCT stock_flow row and
    /// takes the units with the same conditional update the consumer uses.
    ///
    /// `Ok(false)` when the order already has a stock_flow row that took its stock — nothing
    /// is done, so running the repair twice, or alongside the consumer, deducts once — and
    /// when the order was cancelled or expired: its units belong to the stock again.
    pub async fn deduct_for_order(&self, token: &OrderToken) -> Result<bool> {
        let token_text = token.to_string();
        let mut pooled = self.conn().await?;
        let conn: &mut AsyncMysqlConnection = &mut pooled;
        conn.transaction(async |conn| {
            // Locked: a cancel or expiry (`close_order`) waits for this repair, or this
            // repair for it, so a closing order cannot miss the deduction it gives back.
            let order = orders::table
                .filter(orders::order_token.eq(&token_text))
                .select((orders::product_id, orders::quantity, orders::status))
                .for_update()
                .first::<(u64, u32, String)>(conn)
                .await
                .optional()?;
            let Some((product_id, quantity, status)) = order else {
                return Err(StoreError::OrderNotFound(token.clone()));
            };
            if parse_status(&status)?.returned_units() {
                return Ok(false);
            }
            let quantity = i32::try_from(quantity).map_err(|_| {
                StoreError::InvalidData(format!("order {token_text} has quantity {quantity}"))
            })?;
            // The unique key on (order_token, gives_back) decides, not a prior SELECT: a
            // check-then-insert would let two concurrent repairs both pass the check. (The
            // order row's lock serialises repairs too; the key also covers the consumer's
            // SECKILL row, which is written without that lock.)
            let inserted = diesel::insert_into(stock_flow::table)
                .values(NewStockFlow {
                    order_token: &token_text,
                    product_id,
                    quantity,
                    op_type: StockOp::ReconcileDeduct.as_str(),
                })
                .execute(conn)
                .await;
            match inserted {
                Ok(_) => {}
                Err(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::UniqueViolation,
                    _,
                )) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
            take_stock(conn, product_id, i64::from(quantity)).await?;
            Ok(true)
        })
        .await
    }

    /// Opens a run (status `running`) and returns its id. `policy` is at most 16
    /// characters; `product` is `None` for a run over every product.
    pub async fn start_run(&self, policy: &str, product: Option<ProductId>) -> Result<u64> {
        if policy.chars().count() > 16 {
            return Err(StoreError::InvalidData(format!(
                "policy `{policy}` is longer than 16 characters"
            )));
        }
        let mut conn = self.conn().await?;
        diesel::insert_into(reconcile_run::table)
            .values((
                reconcile_run::status.eq(RunStatus::Running.as_str()),
                reconcile_run::policy.eq(policy),
                reconcile_run::product_id.eq(product.map(ProductId::get)),
            ))
            .execute(&mut conn)
            .await?;
        // Per connection, so it is this insert's id whatever other connections do.
        let id = diesel::select(sql::<Unsigned<BigInt>>("LAST_INSERT_ID()"))
            .get_result::<u64>(&mut conn)
            .await?;
        Ok(id)
    }

    pub async fn record_discrepancy(
        &self,
        run_id: u64,
        record: &DiscrepancyRecord<'_>,
    ) -> Result<()> {
        self.record_discrepancies(run_id, std::slice::from_ref(record))
            .await
    }

    /// Records many discrepancies of a run with multi-row inserts. `action` and `outcome`
    /// are cut at 32 characters, `detail` at 500.
    pub async fn record_discrepancies(
        &self,
        run_id: u64,
        records: &[DiscrepancyRecord<'_>],
    ) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn().await?;
        for chunk in records.chunks(CHUNK) {
            let rows: Vec<NewDiscrepancy<'_>> = chunk
                .iter()
                .map(|r| NewDiscrepancy {
                    run_id,
                    product_id: r.product_id.get(),
                    kind: r.kind.as_str(),
                    order_token: r.order_token.map(|t| truncate_chars(t, 64)),
                    action: truncate_chars(r.action, 32),
                    outcome: truncate_chars(r.outcome, 32),
                    detail: truncate_chars(r.detail, 500),
                })
                .collect();
            diesel::insert_into(reconcile_discrepancy::table)
                .values(rows)
                .execute(&mut conn)
                .await?;
        }
        Ok(())
    }

    /// Closes a run with its final status and JSON report.
    pub async fn finish_run(
        &self,
        run_id: u64,
        status: RunStatus,
        report_json: &str,
    ) -> Result<()> {
        let mut conn = self.conn().await?;
        let updated = diesel::update(reconcile_run::table.find(run_id))
            .set((
                reconcile_run::finished_at.eq(sql::<Nullable<diesel::sql_types::Datetime>>(
                    "CURRENT_TIMESTAMP(3)",
                )),
                reconcile_run::status.eq(status.as_str()),
                reconcile_run::report.eq(Some(report_json)),
            ))
            .execute(&mut conn)
            .await?;
        // MySQL reports rows changed, not matched: 0 can also mean "already exactly so".
        if updated == 0 {
            let exists = reconcile_run::table
                .find(run_id)
                .select(count_star())
                .get_result::<i64>(&mut conn)
                .await?
                > 0;
            if !exists {
                return Err(StoreError::InvalidData(format!(
                    "there is no reconcile run {run_id}"
                )));
            }
        }
        Ok(())
    }

    /// The most recently started run.
    pub async fn latest_run(&self) -> Result<Option<RunRow>> {
        let mut conn = self.conn().await?;
        let raw = reconcile_run::table
            .order(reconcile_run::id.desc())
            .select(RawRun::as_select())
            .first(&mut conn)
            .await
            .optional()?;
        to_run_row(raw)
    }

    /// MySQL's stock and the units ordered (by orders neither cancelled nor expired, whose
    /// units went back to the stock), read in ONE statement so that both come from the
    /// same snapshot: read apart, an order written or closed in between looks like drift.
    /// `None` for a product without a stock row.
    pub async fn stock_and_ordered(&self, product: ProductId) -> Result<Option<(i64, i64)>> {
        #[derive(QueryableByName)]
        struct Totals {
            #[diesel(sql_type = BigInt)]
            stock: i64,
            #[diesel(sql_type = BigInt)]
            ordered: i64,
        }
        let mut conn = self.conn().await?;
        let totals = diesel::sql_query(format!(
            "SELECT ps.stock AS stock, \
             (SELECT CAST(COALESCE(SUM(o.quantity), 0) AS SIGNED) FROM orders o \
              WHERE o.product_id = ps.product_id AND o.{HOLDS_UNITS}) AS ordered \
             FROM product_stock ps WHERE ps.product_id = ?"
        ))
        .bind::<Unsigned<BigInt>, _>(product.get())
        .get_result::<Totals>(&mut conn)
        .await
        .optional()?;
        Ok(totals.map(|t| (t.stock, t.ordered)))
    }

    /// One run by id.
    pub async fn run(&self, run_id: u64) -> Result<Option<RunRow>> {
        let mut conn = self.conn().await?;
        let raw = reconcile_run::table
            .find(run_id)
            .select(RawRun::as_select())
            .first(&mut conn)
            .await
            .optional()?;
        to_run_row(raw)
    }

    /// The discrepancies recorded for a run, in the order they were recorded.
    pub async fn discrepancies(&self, run_id: u64) -> Result<Vec<DiscrepancyRow>> {
        let mut conn = self.conn().await?;
        let rows = reconcile_discrepancy::table
            .filter(reconcile_discrepancy::run_id.eq(run_id))
            .order(reconcile_discrepancy::id.asc())
            .select(RawDiscrepancy::as_select())
            .load(&mut conn)
            .await?;
        Ok(rows.into_iter().map(DiscrepancyRow::from).collect())
    }
}

/// The join condition of an order with the stock_flow row that took its stock (SECKILL or
/// RECONCILE_DEDUCT, at most one by the unique key), never its RELEASE.
fn takes_for_order() -> diesel::dsl::And<
    diesel::dsl::Eq<stock_flow::order_token, orders::order_token>,
    diesel::dsl::Eq<stock_flow::gives_back, bool>,
> {
    stock_flow::order_token
        .eq(orders::order_token)
        .and(stock_flow::gives_back.eq(false))
}

/// The tokens of one query by the text MySQL compares. A row is matched back by its exact
/// text: the column's collation ignores case, so a row could answer for a token it is not.
fn by_text(tokens: &[OrderToken]) -> HashMap<String, &OrderToken> {
    tokens
        .iter()
        .map(|token| (token.to_string(), token))
        .collect()
}

fn to_run_row(raw: Option<RawRun>) -> Result<Option<RunRow>> {
    raw.map(|raw| RunRow::try_from(raw).map_err(StoreError::InvalidData))
        .transpose()
}
