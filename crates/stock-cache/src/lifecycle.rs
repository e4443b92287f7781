//! After the purchase: the order's status as Redis keeps it for the crowd polling it, and
//! the units of an order closed unpaid going back to the sale.
//!
//! MySQL decides how an order ends (one conditional write); these calls only follow it.
//! Each one that changes a status publishes `<token> <status>` on the events channel
//! ([`StockCache::events_channel`]) from inside its script, so the write and the event
//! cannot be told apart by a reader: whoever sees the event and reads the order sees the
//! new status.
//!
//! The `result` hash holds, per token, one of: `confirmed` or `confirmed <pay_by_ms>`,
//! `paid`, `cancelled`, `expired` (see [`parse_result`]).

use std::collections::BTreeMap;

use domain::{Closing, OrderStatus, OrderToken, ProductId};
use futures::future::try_join_all;

use crate::{CacheError, StockCache, scripts};

/// What `lua/return_units.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReturnOutcome {
    /// The units are back on sale (stock + q, the buyer's count − q), the flow is
    /// tombstoned with the closing as reason, the result says it, the epoch moved, and the
    /// change was published.
    Returned,
    /// They went back before (the tombstone says cancelled or expired): nothing changed.
    AlreadyReturned,
    /// Redis lost the product (no meta or stock): nothing changed; a reload restores it from
    /// MySQL, which already counts the units as returned.
    NotLoaded,
    /// Redis holds no units for this order (no flow, and no tombstone of a return):
    /// nothing changed. Reconcile reports it.
    NotHeld,
}

impl StockCache {
    /// The Redis channel on which every status change of this deployment's orders is
    /// published as `<token> <status>`. Derived from the key prefix, so deployments (and
    /// tests) sharing a server do not hear each other.
    pub fn events_channel(&self) -> String {
        format!("{}:order-events", self.prefix)
    }

    /// Runs `lua/return_units.lua`: gives back the units of an order MySQL closed as `why`,
    /// at most once however often it is asked, and publishes the change.
    pub async fn return_units(
        &self,
        token: &OrderToken,
        why: Closing,
    ) -> Result<ReturnOutcome, CacheError> {
        let keys = self.keys(token.product_id());
        let code: i64 = self
            .run_script(
                scripts::RETURN_UNITS
                    .key(&keys.sale_keys()[..])
                    .key(&keys.result)
                    .arg(token.to_string())
                    .arg(why.as_str())
                    .arg(self.events_channel()),
            )
            .await?;
        match code {
            1 => Ok(ReturnOutcome::Returned),
            0 => Ok(ReturnOutcome::AlreadyReturned),
            -4 => Ok(ReturnOutcome::NotLoaded),
            -1 => Ok(ReturnOutcome::NotHeld),
            other => Err(CacheError::UnexpectedReply(format!("return_units {other}"))),
        }
    }

    /// Records that these orders are in MySQL, awaiting payment until their `pay_by` (unix
    /// ms), and publishes `<token> confirmed` for each whose result changed; returns how
    /// many did. A flow still reserved is committed: its order is written, so its message
    /// was committed, whatever Redis lost of confirm.lua's write. A result that is already past `confirmed` (paid, cancelled, expired) is
    /// never overwritten, as a redelivered batch re-marks orders that may have ended since.
    /// Orders may be of several products: one script call per product, sent together.
    pub async fn mark_confirmed_until(
        &self,
        orders: &[(OrderToken, i64)],
    ) -> Result<usize, CacheError> {
        self.mark_confirmed_with(
            orders
                .iter()
                .map(|(token, pay_by_ms)| (token, Some(*pay_by_ms))),
        )
        .await
    }

    /// `lua/mark_confirmed.lua` for each product of the orders; `None`: the deadline is not
    /// known (a known one already recorded stays).
    pub(crate) async fn mark_confirmed_with<'a>(
        &self,
        orders: impl IntoIterator<Item = (&'a OrderToken, Option<i64>)>,
    ) -> Result<usize, CacheError> {
        let mut by_product: BTreeMap<ProductId, Vec<(&OrderToken, Option<i64>)>> = BTreeMap::new();
        for (token, pay_by_ms) in orders {
            by_product
                .entry(token.product_id())
                .or_default()
                .push((token, pay_by_ms));
        }
        let channel = self.events_channel();
        let invocations: Vec<_> = by_product
            .into_iter()
            .map(|(product, orders)| {
                let keys = self.keys(product);
                let mut invocation = scripts::MARK_CONFIRMED.key(&keys.result);
                invocation.key(&keys.tomb).key(&keys.flow).arg(&channel);
                for (token, pay_by_ms) in orders {
                    invocation
                        .arg(token.to_string())
                        .arg(pay_by_ms.map(|ms| ms.to_string()).unwrap_or_default());
                }
                invocation
            })
            .collect();
        let changed: Vec<i64> =
            try_join_all(invocations.iter().map(|call| self.run_script(call))).await?;
        Ok(changed
            .into_iter()
            .map(|n| usize::try_from(n).unwrap_or(0))
            .sum())
    }

    /// Records that MySQL took the order's payment and publishes `<token> paid`; true when
    /// this call recorded it, false when Redis already had it (nothing published again).
    pub async fn mark_paid(&self, token: &OrderToken) -> Result<bool, CacheError> {
        let keys = self.keys(token.product_id());
        let code: i64 = self
            .run_script(
                scripts::MARK_PAID
                    .key(&keys.result)
                    .arg(token.to_string())
                    .arg(self.events_channel()),
            )
            .await?;
        match code {
            1 => Ok(true),
            0 => Ok(false),
            other => Err(CacheError::UnexpectedReply(format!("mark_paid {other}"))),
        }
    }
}

/// A `result` field read back: its status, and the payment deadline when it says one.
/// `confirmed` may be bare (written before deadlines, or restored without one) or carry
/// `<pay_by_ms>`; an unreadable value reads as no status, rather than failing the read.
pub(crate) fn parse_result(value: &str) -> (Option<OrderStatus>, Option<i64>) {
    match value.split_once(' ') {
        Some(("confirmed", pay_by)) => (Some(OrderStatus::Confirmed), pay_by.parse().ok()),
        Some(_) => (None, None),
        None => (value.parse().ok(), None),
    }
}

/// The `result` value of an order written back from MySQL in `status`.
pub(crate) fn result_value(status: OrderStatus, pay_by_ms: Option<i64>) -> String {
    match (status, pay_by_ms) {
        // Redis's results start at confirmed: the order is in MySQL.
        (OrderStatus::Queued | OrderStatus::Confirmed, Some(ms)) => format!("confirmed {ms}"),
        (OrderStatus::Queued | OrderStatus::Confirmed, None) => "confirmed".to_owned(),
        (status, _) => status.as_str().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_reads_back_as_the_status_it_was_written_with() {
        for (status, pay_by) in [
            (OrderStatus::Confirmed, Some(1_700_000_000_123)),
            (OrderStatus::Confirmed, None),
            (OrderStatus::Paid, None),
            (OrderStatus::Cancelled, None),
            (OrderStatus::Expired, None),
            (OrderStatus::Failed, None),
        ] {
            assert_eq!(
                parse_result(&result_value(status, pay_by)),
                (Some(status), pay_by)
            );
        }
    }

    #[test]
    fn an_unreadable_result_reads_as_no_status() {
        for value in ["", "CONFIRMED", "paid 12", "shipped"] {
            assert_eq!(parse_result(value), (None, None), "{value}");
        }
    }

    #[test]
    fn a_confirmation_with_an_unreadable_deadline_is_still_confirmed() {
        assert_eq!(
            parse_result("confirmed soon"),
            (Some(OrderStatus::Confirmed), None)
        );
    }
}
