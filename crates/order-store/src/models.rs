//! What the repositories take and give back. The public types speak the domain's language
//! (`ProductId`, `UserId`, UTC times); the `pub(crate)` ones are diesel's view of a row,
//! converted at the edge of this crate so no caller handles a raw `u64` or a naive time.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;
use domain::{OrderStatus, OrderToken, ProductId, UserId};

use crate::error::StoreError;
use crate::schema::{
    orders, product_stock, products, reconcile_discrepancy, reconcile_run, stock_flow,
    unwritable_order,
};

/// The value of `orders.status` for every order the consumer writes: an order row exists
/// only once the purchase is final, and it then awaits payment until its `pay_by`.
pub const ORDER_CONFIRMED: &str = OrderStatus::Confirmed.as_str();

/// `stock_flow.op_type`: why stock moved for an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StockOp {
    /// The consumer deducted it while writing the order.
    Seckill,
    /// Reconcile deducted it for an order the consumer left without one.
    ReconcileDeduct,
    /// The unit went back to stock (negative quantity).
    Release,
}

impl StockOp {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Seckill => "SECKILL",
            Self::ReconcileDeduct => "RECONCILE_DEDUCT",
            Self::Release => "RELEASE",
        }
    }
}

/// A product as an operator defines it; see [`crate::Db::put_product`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewProduct {
    pub id: ProductId,
    pub name: String,
    /// Units the sale has in all, sold or not.
    pub initial_stock: i64,
    pub per_user_limit: u32,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
}

/// What [`crate::Db::put_product`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The product was new.
    Created,
    /// The product existed without orders: its definition and stock were replaced;
    /// `initial_stock` moved by `delta`.
    Replaced { delta: i64 },
    /// The product had orders (and `force` was given): `initial_stock` became the units
    /// asked for, and the stock moved by the same `delta` from what it was, to `stock`, so
    /// that `stock + ordered = initial` still holds for reconcile.
    Restocked { delta: i64, stock: i64 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductRow {
    pub id: ProductId,
    pub name: String,
    pub initial_stock: i64,
    pub per_user_limit: u32,
    /// What one unit costs, in cents; 0 until a price is put
    /// ([`crate::Db::put_priced_product`]).
    pub price_cents: u64,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRow {
    pub id: u64,
    pub order_token: OrderToken,
    pub user_id: UserId,
    pub product_id: ProductId,
    pub quantity: u32,
    /// `confirmed` until it ends, once, as `paid`, `cancelled` or `expired`.
    pub status: OrderStatus,
    pub reserved_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    /// The end of its payment window; `None` only for an order written before orders had
    /// one (such an order never expires).
    pub pay_by: Option<DateTime<Utc>>,
    /// When it ended (paid, cancelled or expired); `None` while it is confirmed.
    pub closed_at: Option<DateTime<Utc>>,
    /// The provider's id of the payment that paid it.
    pub payment_id: Option<String>,
}

/// What [`crate::Db::close_order`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseOutcome {
    /// This call ended the order and gave its units back; the row as it left it.
    Closed(OrderRow),
    /// The order had ended already (paid, cancelled or expired, as its status says):
    /// nothing changed.
    AlreadyEnded(OrderRow),
    /// Asked to expire an order whose `pay_by` has not passed (or that has none): nothing
    /// changed.
    NotDue(OrderRow),
    /// MySQL holds no such order.
    Unknown,
}

/// A payment provider's callback, checked (signature) by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payment {
    /// The provider's id of the payment: a callback delivered twice carries the same one.
    /// ASCII, 1 to 128 characters.
    pub payment_id: String,
    pub order_token: OrderToken,
    pub amount_cents: u64,
    /// When the provider took the money.
    pub paid_at: DateTime<Utc>,
}

/// What [`crate::Db::record_payment`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentOutcome {
    /// The payment paid the order (now, or when this payment id was first recorded).
    Paid(OrderRow),
    /// The order had ended before this payment could pay it (cancelled, expired, or paid
    /// by another payment): the payment is recorded as a refund due.
    Closed(OrderRow),
    /// MySQL holds no such order (it may still be on its way): nothing was recorded.
    Unknown,
    /// The amount is not the order's price: nothing was recorded.
    AmountMismatch { expected_cents: u64 },
}

/// `payments.outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PaymentRecord {
    Applied,
    RefundDue,
}

impl PaymentRecord {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::RefundDue => "refund_due",
        }
    }
}

impl FromStr for PaymentRecord {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "applied" => Ok(Self::Applied),
            "refund_due" => Ok(Self::RefundDue),
            other => Err(StoreError::InvalidData(format!(
                "`{other}` is not a payment outcome"
            ))),
        }
    }
}

/// A product's orders after the purchase, from one snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LifecycleCounts {
    pub paid_orders: i64,
    pub paid_units: i64,
    /// Units of cancelled and expired orders, given back to the stock.
    pub returned_units: i64,
    /// Payments recorded `refund_due`: money to give back.
    pub refunds_due: i64,
}

/// A payment that came for an order that had ended: the money goes back to the buyer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundDue {
    pub payment_id: String,
    pub order_token: OrderToken,
    pub amount_cents: u64,
    pub paid_at: DateTime<Utc>,
}

/// What [`crate::Db::write_orders`] did with a batch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WriteSummary {
    /// Orders written (and their stock deducted) by this call.
    pub inserted: usize,
    /// Messages that named an order already written, by an earlier delivery or earlier in
    /// the same batch: nothing was done for them.
    pub duplicates: usize,
    /// `product_stock.stock` of every product this call took stock from, in product id
    /// order, as this batch's transaction left it (read under the row lock its
    /// conditional update took, so no other writer's change is mixed in). Empty when
    /// nothing was inserted: a product none of whose orders were new is not read.
    pub stock_left: Vec<(ProductId, i64)>,
}

impl WriteSummary {
    /// Adds what a later transaction did: its counts, and its stock readings after ours
    /// (so the last reading of a product is the latest).
    pub fn absorb(&mut self, later: WriteSummary) {
        self.inserted += later.inserted;
        self.duplicates += later.duplicates;
        self.stock_left.extend(later.stock_left);
    }
}

/// An order MySQL refused for good as it stands (`unwritable_order`): its batch was
/// acknowledged without it, and it waits, unresolved, for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnwritableOrderRow {
    /// As MySQL holds it: a row a person must read is shown even if its token is malformed.
    pub order_token: String,
    pub product_id: ProductId,
    pub user_id: UserId,
    pub quantity: u32,
    pub reserved_at: DateTime<Utc>,
    /// The message that carried it the last time it was refused.
    pub msg_id: String,
    /// Why, e.g. "stock exhausted in MySQL: …"; cut at 500 characters.
    pub reason: String,
    /// How often it was refused: redeliveries and re-publishes each count.
    pub refusals: u32,
    pub first_refused_at: DateTime<Utc>,
    pub last_refused_at: DateTime<Utc>,
}

/// What MySQL holds for one order token, for reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderFacts {
    pub quantity: u32,
    pub status: OrderStatus,
    /// A `stock_flow` row that took stock (SECKILL or RECONCILE_DEDUCT) exists for the
    /// token: its stock was accounted for.
    pub has_stock_flow: bool,
}

/// One order of a product, as reconcile pages through them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderPageRow {
    /// The keyset cursor: pass the last one seen as `after_id` for the next page.
    pub id: u64,
    /// Kept as text: reconcile matches it against Redis hash fields, and one malformed
    /// token must not make a whole page unreadable.
    pub order_token: String,
    pub user_id: UserId,
    pub quantity: u32,
    /// When the gateway reserved it (unix ms), as the order message said.
    pub reserved_at_ms: i64,
    /// Open (`confirmed`), `paid`, or closed (`cancelled`, `expired`: its units count
    /// back in the stock, not as ordered).
    pub status: OrderStatus,
    /// The end of its payment window (unix ms); `None` for an order written before orders
    /// had one.
    pub pay_by_ms: Option<i64>,
    /// A `stock_flow` row took its stock (SECKILL or RECONCILE_DEDUCT).
    pub has_stock_flow: bool,
    /// A RELEASE `stock_flow` row gave its stock back: expected exactly for a cancelled
    /// or expired order that had its stock taken.
    pub has_release: bool,
}

/// A paid order whose stock a RELEASE row gave back: the buyer paid for units the stock
/// sells again. Reconcile reports it; a person decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleasedPaidOrder {
    /// The keyset cursor, as for [`OrderPageRow::id`].
    pub id: u64,
    /// Kept as text, as in [`OrderPageRow`].
    pub order_token: String,
    pub quantity: u32,
    /// The units the RELEASE row gave back (positive).
    pub released: i64,
}

/// `reconcile_run.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Running,
    /// Nothing to repair.
    Clean,
    /// Every discrepancy found was repaired.
    Repaired,
    /// Some discrepancies are left for a person.
    Unresolved,
    /// The run itself failed.
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Clean => "clean",
            Self::Repaired => "repaired",
            Self::Unresolved => "unresolved",
            Self::Failed => "failed",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "running" => Self::Running,
            "clean" => Self::Clean,
            "repaired" => Self::Repaired,
            "unresolved" => Self::Unresolved,
            "failed" => Self::Failed,
            other => return Err(format!("`{other}` is not a reconcile run status")),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    pub id: u64,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub status: RunStatus,
    pub policy: String,
    pub product_id: Option<ProductId>,
    pub report: Option<String>,
}

/// One discrepancy of a run and what was done about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscrepancyRecord<'a> {
    pub product_id: ProductId,
    pub kind: domain::reconcile::DiscrepancyKind,
    pub order_token: Option<&'a str>,
    /// e.g. `republish`, `deduct`, `release`, `report` (at most 32 characters).
    pub action: &'a str,
    /// e.g. `done`, `skipped`, `failed` (at most 32 characters).
    pub outcome: &'a str,
    /// Free text; cut at 500 characters.
    pub detail: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscrepancyRow {
    pub id: u64,
    pub run_id: u64,
    pub product_id: ProductId,
    /// As [`domain::reconcile::DiscrepancyKind::as_str`] wrote it.
    pub kind: String,
    pub order_token: Option<String>,
    pub action: String,
    pub outcome: String,
    pub detail: String,
    pub created_at: DateTime<Utc>,
}

// ---- diesel's side -------------------------------------------------------------------

#[derive(Queryable, Selectable)]
#[diesel(table_name = products)]
#[diesel(check_for_backend(diesel::mysql::Mysql))]
pub(crate) struct RawProduct {
    id: u64,
    name: String,
    initial_stock: i64,
    per_user_limit: u32,
    price_cents: u64,
    starts_at: Option<NaiveDateTime>,
    ends_at: Option<NaiveDateTime>,
    created_at: NaiveDateTime,
    updated_at: NaiveDateTime,
}

impl From<RawProduct> for ProductRow {
    fn from(raw: RawProduct) -> Self {
        Self {
            id: ProductId(raw.id),
            name: raw.name,
            initial_stock: raw.initial_stock,
            per_user_limit: raw.per_user_limit,
            price_cents: raw.price_cents,
            starts_at: raw.starts_at.map(|t| t.and_utc()),
            ends_at: raw.ends_at.map(|t| t.and_utc()),
            created_at: raw.created_at.and_utc(),
            updated_at: raw.updated_at.and_utc(),
        }
    }
}

#[derive(Insertable, AsChangeset)]
#[diesel(table_name = products)]
pub(crate) struct ProductValues<'a> {
    pub id: u64,
    pub name: &'a str,
    pub initial_stock: i64,
    pub per_user_limit: u32,
    // Written when given; a redefinition without a price keeps the one it had (a new
    // product gets the column's default, 0).
    pub price_cents: Option<u64>,
    // Always written, so that a redefinition can clear a sale window.
    #[diesel(treat_none_as_null = true)]
    pub starts_at: Option<NaiveDateTime>,
    #[diesel(treat_none_as_null = true)]
    pub ends_at: Option<NaiveDateTime>,
}

#[derive(Insertable)]
#[diesel(table_name = product_stock)]
pub(crate) struct StockValues {
    pub product_id: u64,
    pub stock: i64,
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = orders)]
#[diesel(check_for_backend(diesel::mysql::Mysql))]
pub(crate) struct RawOrder {
    pub id: u64,
    pub user_id: u64,
    pub product_id: u64,
    pub quantity: u32,
    pub status: String,
    pub reserved_at: NaiveDateTime,
    pub created_at: NaiveDateTime,
    pub pay_by: Option<NaiveDateTime>,
    pub closed_at: Option<NaiveDateTime>,
    pub payment_id: Option<String>,
}

impl RawOrder {
    pub(crate) fn into_row(self, order_token: OrderToken) -> Result<OrderRow, StoreError> {
        Ok(OrderRow {
            id: self.id,
            status: parse_status(&self.status)?,
            order_token,
            user_id: UserId(self.user_id),
            product_id: ProductId(self.product_id),
            quantity: self.quantity,
            reserved_at: self.reserved_at.and_utc(),
            created_at: self.created_at.and_utc(),
            pay_by: self.pay_by.map(|t| t.and_utc()),
            closed_at: self.closed_at.map(|t| t.and_utc()),
            payment_id: self.payment_id,
        })
    }
}

/// `orders.status` as the domain word; anything else in the column is bad data.
pub(crate) fn parse_status(status: &str) -> Result<OrderStatus, StoreError> {
    status
        .parse()
        .map_err(|e: domain::UnknownStatus| StoreError::InvalidData(e.to_string()))
}

#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = orders)]
pub(crate) struct NewOrder {
    pub order_token: String,
    pub user_id: u64,
    pub product_id: u64,
    pub quantity: u32,
    pub status: &'static str,
    pub reserved_at: NaiveDateTime,
    pub pay_by: NaiveDateTime,
}

#[derive(Insertable)]
#[diesel(table_name = stock_flow)]
pub(crate) struct NewStockFlow<'a> {
    pub order_token: &'a str,
    pub product_id: u64,
    pub quantity: i32,
    pub op_type: &'static str,
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = reconcile_run)]
#[diesel(check_for_backend(diesel::mysql::Mysql))]
pub(crate) struct RawRun {
    id: u64,
    started_at: NaiveDateTime,
    finished_at: Option<NaiveDateTime>,
    status: String,
    policy: String,
    product_id: Option<u64>,
    report: Option<String>,
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = reconcile_discrepancy)]
#[diesel(check_for_backend(diesel::mysql::Mysql))]
pub(crate) struct RawDiscrepancy {
    id: u64,
    run_id: u64,
    product_id: u64,
    kind: String,
    order_token: Option<String>,
    action: String,
    outcome: String,
    detail: String,
    created_at: NaiveDateTime,
}

impl From<RawDiscrepancy> for DiscrepancyRow {
    fn from(raw: RawDiscrepancy) -> Self {
        Self {
            id: raw.id,
            run_id: raw.run_id,
            product_id: ProductId(raw.product_id),
            kind: raw.kind,
            order_token: raw.order_token,
            action: raw.action,
            outcome: raw.outcome,
            detail: raw.detail,
            created_at: raw.created_at.and_utc(),
        }
    }
}

#[derive(Insertable)]
#[diesel(table_name = reconcile_discrepancy)]
pub(crate) struct NewDiscrepancy<'a> {
    pub run_id: u64,
    pub product_id: u64,
    pub kind: &'static str,
    pub order_token: Option<&'a str>,
    pub action: &'a str,
    pub outcome: &'a str,
    pub detail: &'a str,
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = unwritable_order)]
#[diesel(check_for_backend(diesel::mysql::Mysql))]
pub(crate) struct RawUnwritableOrder {
    order_token: String,
    product_id: u64,
    user_id: u64,
    quantity: u32,
    reserved_at: NaiveDateTime,
    msg_id: String,
    reason: String,
    refusals: u32,
    first_refused_at: NaiveDateTime,
    last_refused_at: NaiveDateTime,
}

impl From<RawUnwritableOrder> for UnwritableOrderRow {
    fn from(raw: RawUnwritableOrder) -> Self {
        Self {
            order_token: raw.order_token,
            product_id: ProductId(raw.product_id),
            user_id: UserId(raw.user_id),
            quantity: raw.quantity,
            reserved_at: raw.reserved_at.and_utc(),
            msg_id: raw.msg_id,
            reason: raw.reason,
            refusals: raw.refusals,
            first_refused_at: raw.first_refused_at.and_utc(),
            last_refused_at: raw.last_refused_at.and_utc(),
        }
    }
}

impl TryFrom<RawRun> for RunRow {
    type Error = String;

    fn try_from(raw: RawRun) -> Result<Self, Self::Error> {
        Ok(Self {
            id: raw.id,
            started_at: raw.started_at.and_utc(),
            finished_at: raw.finished_at.map(|t| t.and_utc()),
            status: raw.status.parse()?,
            policy: raw.policy,
            product_id: raw.product_id.map(ProductId),
            report: raw.report,
        })
    }
}

/// Cuts `s` to at most `max` characters (what a VARCHAR(max) column counts), on a
/// character boundary.
pub(crate) fn truncate_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_counts_characters_not_bytes() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("abc", 3), "abc");
        assert_eq!(truncate_chars("abc", 10), "abc");
        assert_eq!(truncate_chars("秒杀秒杀", 3), "秒杀秒");
    }

    #[test]
    fn run_statuses_round_trip_through_text() {
        for status in [
            RunStatus::Running,
            RunStatus::Clean,
            RunStatus::Repaired,
            RunStatus::Unresolved,
            RunStatus::Failed,
        ] {
            assert_eq!(status.as_str().parse::<RunStatus>(), Ok(status));
        }
        assert!("done".parse::<RunStatus>().is_err());
    }
}
