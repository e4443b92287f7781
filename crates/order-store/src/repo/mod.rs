//! The repositories: `impl Db` blocks, one file per area of the schema.

mod lease;
mod lifecycle;
mod orders;
mod products;
mod reconcile;
mod rejected;

pub use orders::DEFAULT_PAYMENT_WINDOW;
pub use products::PutError;

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::dsl::sql;
use diesel::expression::SqlLiteral;
use diesel::sql_types::BigInt;

use crate::error::{Result, StoreError};

/// Longest list one `IN (…)` or multi-row `INSERT` carries: far below MySQL's 65,535
/// placeholders per statement, and small enough to keep each statement quick.
pub(crate) const CHUNK: usize = 1000;

/// `SUM(quantity)` is DECIMAL in MySQL; the cast brings it back to a BIGINT diesel reads.
pub(crate) fn sum_quantity() -> SqlLiteral<BigInt> {
    sql::<BigInt>("CAST(COALESCE(SUM(quantity), 0) AS SIGNED)")
}

/// `orders.status` of the orders whose units still count as ordered: every one but the
/// cancelled and expired, whose units went back to the stock. The one place the MySQL
/// stock equation (`stock + ordered = initial`) chooses its orders.
pub(crate) const HOLDS_UNITS: &str = "status NOT IN ('cancelled', 'expired')";

pub(crate) fn count_star() -> SqlLiteral<BigInt> {
    sql::<BigInt>("COUNT(*)")
}

/// A DATETIME column holds years 1000–9999; anything else would be cut or refused by the
/// server, so it is refused here with a clear message.
pub(crate) fn to_datetime(at: DateTime<Utc>) -> Result<NaiveDateTime> {
    use chrono::Datelike;

    let naive = at.naive_utc();
    if (1000..=9999).contains(&naive.year()) {
        Ok(naive)
    } else {
        Err(StoreError::InvalidData(format!(
            "{at} is outside what a DATETIME column holds"
        )))
    }
}

pub(crate) fn millis_to_datetime(ms: i64) -> Result<NaiveDateTime> {
    let at = DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StoreError::InvalidData(format!("{ms} ms is not a representable time")))?;
    to_datetime(at)
}
