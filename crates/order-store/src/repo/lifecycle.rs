//! After the purchase: an order is `confirmed` until its `pay_by`, and ends exactly once,
//! as `paid` (a payment callback), `cancelled` (the buyer) or `expired` (the deadline).
//!
//! A callback, a cancel and the deadline may race on the same order from different
//! processes. Each ending is ONE conditional update (`… WHERE order_token = ? AND status =
//! 'confirmed'`): InnoDB lets one of them change the row, the others wait on its lock and
//! then match nothing, and read what the winner left. A cancelled or expired order gives
//! its units back in the transaction of its status change, so the MySQL stock equation
//! (`stock + units of orders neither cancelled nor expired = initial`) holds at every
//! commit. A payment is recorded once per provider payment id (`payments`' primary key),
//! whatever it met, so a redelivered callback answers what the first delivery did.

use std::time::Duration;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::{BigInt, Unsigned, Varchar};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use domain::{Closing, OrderStatus, OrderToken, ProductId};
use tracing::debug;

use super::to_datetime;
use crate::db::Db;
use crate::error::{Result, StoreError, is_deadlock};
use crate::models::{
    CloseOutcome, LifecycleCounts, NewStockFlow, OrderRow, Payment, PaymentOutcome, PaymentRecord,
    RawOrder, RefundDue, StockOp,
};
use crate::schema::{orders, payments, products, stock_flow};

/// The cancel: any confirmed order, whatever its deadline.
const CANCEL: &str = "\
    UPDATE orders SET status = 'cancelled', closed_at = NOW(3) \
    WHERE order_token = ? AND status = 'confirmed'";

/// The expiry: a confirmed order whose deadline has passed by MySQL's clock (the clock
/// the sweep's `overdue_orders` reads too). An order without `pay_by` never matches.
const EXPIRE: &str = "\
    UPDATE orders SET status = 'expired', closed_at = NOW(3) \
    WHERE order_token = ? AND status = 'confirmed' AND pay_by <= NOW(3)";

const PAY: &str = "\
    UPDATE orders SET status = 'paid', payment_id = ?, closed_at = NOW(3) \
    WHERE order_token = ? AND status = 'confirmed'";

const GIVE_BACK: &str = "\
    UPDATE product_stock SET stock = stock + ?, version = version + 1 WHERE product_id = ?";

const OVERDUE: &str = "\
    SELECT order_token FROM orders \
    WHERE product_id = ? AND status = 'confirmed' AND pay_by < NOW(3) - INTERVAL ? MICROSECOND \
    ORDER BY pay_by LIMIT ?";

// One pass over the product's ended orders (the index on (product_id, status, …)), and
// the refunds due, in one statement: one snapshot.
const COUNTS: &str = "\
    SELECT \
      CAST(COALESCE(SUM(o.status = 'paid'), 0) AS SIGNED) AS paid_orders, \
      CAST(COALESCE(SUM(CASE WHEN o.status = 'paid' THEN o.quantity ELSE 0 END), 0) \
        AS SIGNED) AS paid_units, \
      CAST(COALESCE(SUM(CASE WHEN o.status IN ('cancelled', 'expired') THEN o.quantity \
        ELSE 0 END), 0) AS SIGNED) AS returned_units, \
      (SELECT COUNT(*) FROM payments p WHERE p.product_id = ? AND p.outcome = 'refund_due') \
        AS refunds_due \
    FROM orders o \
    WHERE o.product_id = ? AND o.status IN ('paid', 'cancelled', 'expired')";

/// How often a closing or a payment is run at most when InnoDB picks it as a deadlock's
/// victim. Racers on one order only queue on its row lock, so a deadlock needs another
/// writer's locks in the mix (a consumer batch on the stock row); the next attempt
/// normally passes, and past this the caller gets a retryable error.
const ATTEMPTS: u32 = 3;

impl Db {
    /// Ends a confirmed order unpaid — the buyer cancelled it, or (`Closing::Expired`) its
    /// `pay_by` has passed by MySQL's clock — and gives its units back, in one transaction:
    /// the conditional status update and, only if it changed the row, `product_stock.stock
    /// + quantity` and a RELEASE `stock_flow` row of `-quantity`.
    ///
    /// Exactly one of any number of concurrent closings and payments of one order wins;
    /// every other call answers [`CloseOutcome::AlreadyEnded`] with the winner's status.
    /// Units are given back only if a take (SECKILL or RECONCILE_DEDUCT) is recorded for
    /// the order: units never taken from the stock are not added to it. (Reconcile's
    /// deduction locks the order row first, so it cannot slip between.)
    pub async fn close_order(&self, token: &OrderToken, why: Closing) -> Result<CloseOutcome> {
        let token_text = token.to_string();
        let mut pooled = self.conn().await?;
        let conn: &mut AsyncMysqlConnection = &mut pooled;
        let mut attempt = 1;
        loop {
            let closed = conn
                .transaction(async |conn| close_in(conn, token, &token_text, why).await)
                .await;
            match closed {
                Ok(Some(row)) => return Ok(CloseOutcome::Closed(row)),
                Ok(None) => break,
                Err(StoreError::Query(e)) if is_deadlock(&e) => {
                    if attempt >= ATTEMPTS {
                        return Err(StoreError::Conflict {
                            attempts: attempt,
                            last: e,
                        });
                    }
                    debug!(attempt, order = %token.short(), "Closing an order met a deadlock; retrying.");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
        // It changed nothing: read what the order is, outside the transaction, so the read
        // sees whoever won (the update waited for the winner's commit).
        Ok(match order_row(conn, token, &token_text).await? {
            None => CloseOutcome::Unknown,
            // Only an expiry leaves a confirmed order alone: its deadline has not passed.
            Some(row) if row.status == OrderStatus::Confirmed => CloseOutcome::NotDue(row),
            Some(row) => CloseOutcome::AlreadyEnded(row),
        })
    }

    /// Records a payment callback and pays the order with it, in one transaction:
    /// - a `payment_id` recorded before: its first answer again, nothing changed
    ///   ([`PaymentOutcome::Paid`] if it paid the order, else [`PaymentOutcome::Closed`]),
    ///   read from the order it was recorded for;
    /// - no such order: [`PaymentOutcome::Unknown`], nothing recorded;
    /// - an amount other than `products.price_cents × quantity`:
    ///   [`PaymentOutcome::AmountMismatch`], nothing recorded;
    /// - otherwise the conditional update to `paid`. Won: the payment is recorded
    ///   `applied`, [`PaymentOutcome::Paid`]. Lost (the order was cancelled, expired, or
    ///   paid by another payment — a double charge): recorded `refund_due`,
    ///   [`PaymentOutcome::Closed`] with the order as it ended.
    ///
    /// Two deliveries of one payment at once cannot both be recorded (the primary key):
    /// the later one finds the earlier's record and answers from it.
    pub async fn record_payment(&self, p: &Payment) -> Result<PaymentOutcome> {
        check_payment_id(&p.payment_id)?;
        let paid_at = to_datetime(p.paid_at)?;
        let token_text = p.order_token.to_string();
        let mut pooled = self.conn().await?;
        let conn: &mut AsyncMysqlConnection = &mut pooled;
        let mut attempt = 1;
        loop {
            let paid = conn
                .transaction(async |conn| pay_in(conn, p, &token_text, paid_at).await)
                .await;
            match paid {
                Ok(outcome) => return Ok(outcome),
                Err(StoreError::Query(DieselError::DatabaseError(
                    DatabaseErrorKind::UniqueViolation,
                    _,
                ))) => {
                    // Another delivery of this payment recorded it first, and has committed
                    // (InnoDB made our insert wait for it).
                    debug!(payment = %p.payment_id, "A concurrent delivery recorded the payment first.");
                    return match replay(conn, &p.payment_id).await? {
                        Some(outcome) => Ok(outcome),
                        None => Err(StoreError::InvalidData(format!(
                            "payment {} collided with a record that is not there",
                            p.payment_id
                        ))),
                    };
                }
                Err(StoreError::Query(e)) if is_deadlock(&e) => {
                    if attempt >= ATTEMPTS {
                        return Err(StoreError::Conflict {
                            attempts: attempt,
                            last: e,
                        });
                    }
                    debug!(attempt, payment = %p.payment_id, "Recording a payment met a deadlock; retrying.");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Up to `limit` confirmed orders of `product` whose `pay_by` passed more than
    /// `overdue_by` ago by MySQL's clock, the most overdue first: what the expiry sweep
    /// closes with [`Db::close_order`]. `overdue_by` leaves the deadline's own process
    /// (the gateway's timer) time to act first.
    pub async fn overdue_orders(
        &self,
        product: ProductId,
        overdue_by: Duration,
        limit: i64,
    ) -> Result<Vec<OrderToken>> {
        #[derive(QueryableByName)]
        struct Overdue {
            #[diesel(sql_type = Varchar)]
            order_token: String,
        }
        let micros = i64::try_from(overdue_by.as_micros()).unwrap_or(i64::MAX);
        let mut conn = self.conn().await?;
        let rows = diesel::sql_query(OVERDUE)
            .bind::<Unsigned<BigInt>, _>(product.get())
            .bind::<BigInt, _>(micros)
            .bind::<BigInt, _>(limit.max(0))
            .load::<Overdue>(&mut conn)
            .await?;
        rows.into_iter()
            .map(|row| parse_token(&row.order_token))
            .collect()
    }

    /// The product's paid orders and units, the units its cancelled and expired orders
    /// gave back, and the payments it owes back, read by one statement.
    pub async fn lifecycle_counts(&self, product: ProductId) -> Result<LifecycleCounts> {
        #[derive(QueryableByName)]
        struct Counts {
            #[diesel(sql_type = BigInt)]
            paid_orders: i64,
            #[diesel(sql_type = BigInt)]
            paid_units: i64,
            #[diesel(sql_type = BigInt)]
            returned_units: i64,
            #[diesel(sql_type = BigInt)]
            refunds_due: i64,
        }
        let mut conn = self.conn().await?;
        let counts = diesel::sql_query(COUNTS)
            .bind::<Unsigned<BigInt>, _>(product.get())
            .bind::<Unsigned<BigInt>, _>(product.get())
            .get_result::<Counts>(&mut conn)
            .await?;
        Ok(LifecycleCounts {
            paid_orders: counts.paid_orders,
            paid_units: counts.paid_units,
            returned_units: counts.returned_units,
            refunds_due: counts.refunds_due,
        })
    }

    /// The payments of the product's orders that came after the order had ended, in the
    /// order they were recorded: money to give back.
    pub async fn refunds_due(&self, product: ProductId) -> Result<Vec<RefundDue>> {
        let mut conn = self.conn().await?;
        let rows = payments::table
            .filter(payments::product_id.eq(product.get()))
            .filter(payments::outcome.eq(PaymentRecord::RefundDue.as_str()))
            .order((payments::created_at.asc(), payments::payment_id.asc()))
            .select((
                payments::payment_id,
                payments::order_token,
                payments::amount_cents,
                payments::paid_at,
            ))
            .load::<(String, String, u64, NaiveDateTime)>(&mut conn)
            .await?;
        rows.into_iter()
            .map(|(payment_id, order_token, amount_cents, paid_at)| {
                Ok(RefundDue {
                    payment_id,
                    order_token: parse_token(&order_token)?,
                    amount_cents,
                    paid_at: paid_at.and_utc(),
                })
            })
            .collect()
    }
}

/// One closing attempt, inside the caller's transaction: the row as this call left it if
/// it won, `None` if the update changed nothing.
async fn close_in(
    conn: &mut AsyncMysqlConnection,
    token: &OrderToken,
    token_text: &str,
    why: Closing,
) -> Result<Option<OrderRow>> {
    let update = match why {
        Closing::Cancelled => CANCEL,
        Closing::Expired => EXPIRE,
    };
    let changed = diesel::sql_query(update)
        .bind::<Varchar, _>(token_text)
        .execute(conn)
        .await?;
    if changed == 0 {
        return Ok(None);
    }
    // Ours now: the update holds the row's lock until the commit.
    let row = order_row(conn, token, token_text)
        .await?
        .ok_or_else(|| StoreError::OrderNotFound(token.clone()))?;
    let taken = stock_flow::table
        .filter(stock_flow::order_token.eq(token_text))
        .filter(stock_flow::gives_back.eq(false))
        .select(stock_flow::quantity)
        .first::<i32>(conn)
        .await
        .optional()?;
    if let Some(units) = taken {
        give_back(conn, token_text, row.product_id, units).await?;
    }
    Ok(Some(row))
}

/// The RELEASE row and the units back on the stock row. The unique key allows one
/// RELEASE per token, so a second give-back for an order fails the transaction instead
/// of adding its units twice.
async fn give_back(
    conn: &mut AsyncMysqlConnection,
    token_text: &str,
    product: ProductId,
    units: i32,
) -> Result<()> {
    diesel::insert_into(stock_flow::table)
        .values(NewStockFlow {
            order_token: token_text,
            product_id: product.get(),
            quantity: -units,
            op_type: StockOp::Release.as_str(),
        })
        .execute(conn)
        .await?;
    let updated = diesel::sql_query(GIVE_BACK)
        .bind::<BigInt, _>(i64::from(units))
        .bind::<Unsigned<BigInt>, _>(product.get())
        .execute(conn)
        .await?;
    if updated == 1 {
        Ok(())
    } else {
        // Orders are only ever written against a stock row, and stock rows are not deleted.
        Err(StoreError::UnknownProduct(product))
    }
}

/// One payment attempt, inside the caller's transaction.
async fn pay_in(
    conn: &mut AsyncMysqlConnection,
    p: &Payment,
    token_text: &str,
    paid_at: NaiveDateTime,
) -> Result<PaymentOutcome> {
    if let Some(answered) = replay(conn, &p.payment_id).await? {
        return Ok(answered);
    }
    let priced = orders::table
        .inner_join(products::table.on(products::id.eq(orders::product_id)))
        .filter(orders::order_token.eq(token_text))
        .select((orders::product_id, orders::quantity, products::price_cents))
        .first::<(u64, u32, u64)>(conn)
        .await
        .optional()?;
    let Some((product_id, quantity, price_cents)) = priced else {
        return Ok(PaymentOutcome::Unknown);
    };
    let expected_cents = price_cents
        .checked_mul(u64::from(quantity))
        .ok_or_else(|| {
            StoreError::InvalidData(format!(
                "{quantity} units at {price_cents} cents overflow a payment amount"
            ))
        })?;
    if p.amount_cents != expected_cents {
        return Ok(PaymentOutcome::AmountMismatch { expected_cents });
    }
    let changed = diesel::sql_query(PAY)
        .bind::<Varchar, _>(&p.payment_id)
        .bind::<Varchar, _>(token_text)
        .execute(conn)
        .await?;
    let record = if changed == 1 {
        PaymentRecord::Applied
    } else {
        PaymentRecord::RefundDue
    };
    // Won: our own change. Lost: a locking read, which sees the winner's commit (a plain
    // read would answer from this transaction's snapshot, taken before the update).
    let row = if changed == 1 {
        order_row(conn, &p.order_token, token_text).await?
    } else {
        locked_order_row(conn, &p.order_token, token_text).await?
    }
    .ok_or_else(|| StoreError::OrderNotFound(p.order_token.clone()))?;
    diesel::insert_into(payments::table)
        .values((
            payments::payment_id.eq(&p.payment_id),
            payments::order_token.eq(token_text),
            payments::product_id.eq(product_id),
            payments::amount_cents.eq(p.amount_cents),
            payments::paid_at.eq(paid_at),
            payments::outcome.eq(record.as_str()),
        ))
        .execute(conn)
        .await?;
    Ok(match record {
        PaymentRecord::Applied => PaymentOutcome::Paid(row),
        PaymentRecord::RefundDue => PaymentOutcome::Closed(row),
    })
}

/// What a payment id answered when it was recorded, with its order as it is now; `None`
/// for a payment id never recorded.
async fn replay(
    conn: &mut AsyncMysqlConnection,
    payment_id: &str,
) -> Result<Option<PaymentOutcome>> {
    let recorded = payments::table
        .find(payment_id)
        .select((payments::order_token, payments::outcome))
        .first::<(String, String)>(conn)
        .await
        .optional()?;
    let Some((token_text, outcome)) = recorded else {
        return Ok(None);
    };
    let token = parse_token(&token_text)?;
    let row = order_row(conn, &token, &token_text)
        .await?
        .ok_or_else(|| StoreError::OrderNotFound(token.clone()))?;
    Ok(Some(match outcome.parse::<PaymentRecord>()? {
        PaymentRecord::Applied => PaymentOutcome::Paid(row),
        PaymentRecord::RefundDue => PaymentOutcome::Closed(row),
    }))
}

async fn order_row(
    conn: &mut AsyncMysqlConnection,
    token: &OrderToken,
    token_text: &str,
) -> Result<Option<OrderRow>> {
    orders::table
        .filter(orders::order_token.eq(token_text))
        .select(RawOrder::as_select())
        .first(conn)
        .await
        .optional()?
        .map(|raw| raw.into_row(token.clone()))
        .transpose()
}

async fn locked_order_row(
    conn: &mut AsyncMysqlConnection,
    token: &OrderToken,
    token_text: &str,
) -> Result<Option<OrderRow>> {
    orders::table
        .filter(orders::order_token.eq(token_text))
        .select(RawOrder::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()?
        .map(|raw| raw.into_row(token.clone()))
        .transpose()
}

/// `payments.payment_id` is ASCII of at most 128 characters; anything else would be cut
/// or refused by the server, so it is refused here with a clear message.
fn check_payment_id(payment_id: &str) -> Result<()> {
    if payment_id.is_empty()
        || payment_id.len() > 128
        || !payment_id.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(StoreError::InvalidData(format!(
            "payment id {payment_id:?} is not 1 to 128 printable ASCII characters"
        )));
    }
    Ok(())
}

/// A token this crate wrote from an `OrderToken`; anything else in the column is bad data.
fn parse_token(text: &str) -> Result<OrderToken> {
    text.parse()
        .map_err(|e| StoreError::InvalidData(format!("order token {text:?}: {e}")))
}
