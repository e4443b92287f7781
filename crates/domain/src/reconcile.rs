//! How reconcile tells one order token's records apart, and what a product's totals must
//! add up to. Pure rules: the reconcile service gathers the facts and applies the repairs.
//!
//! After the purchase an order ends once, as paid, cancelled or expired, and a cancelled or
//! expired one gives its units back: in MySQL first (stock + q and a RELEASE row, with its
//! status change), then in Redis (its flow becomes a tombstone saying why, stock + q).
//! Reconcile checks that the two stores agree on it, with MySQL as the truth: what MySQL
//! closed but Redis still holds is given back; what Redis gave back but MySQL holds open
//! (or paid) is for a person, since returning it in MySQL too would unsell a unit someone
//! may have paid for.

use serde::{Deserialize, Serialize};

use crate::flow::FlowState;
use crate::lifecycle::{Closing, OrderStatus};

/// What Redis and MySQL hold for one order token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenFacts {
    pub flow: Option<FlowFact>,
    /// The order's status in MySQL; `None` when MySQL has no order for the token.
    pub order: Option<OrderStatus>,
    pub has_stock_flow: bool,
    /// Redis returned the token's units: its tombstone says it was cancelled or expired.
    pub returned_in_redis: Option<Closing>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowFact {
    pub reserved_at_ms: i64,
    pub state: FlowState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiscrepancyKind {
    /// A flow with no order, older than the grace window: an under-sell until repaired.
    MissingOrder,
    /// An order whose stock was never deducted in MySQL: an over-sell risk.
    StockNotDeducted,
    /// An order with no flow in Redis: reported for a person to judge.
    OrphanOrder,
    /// Redis stock plus the units in flows is not the initial stock.
    RedisDrift,
    /// MySQL stock plus the units ordered is not the initial stock.
    MysqlDrift,
    /// A confirmed order past its `pay_by` and the grace after it: its deadline message was
    /// lost. Reconcile expires it, in MySQL and then in Redis.
    OverdueUnexpired,
    /// An order MySQL cancelled or expired whose flow is still in Redis: its units were
    /// not given back to the sale there. Reconcile gives them back.
    UnitNotReturned,
    /// Redis gave back the units of an order MySQL holds open or paid (its tombstone says
    /// cancelled or expired): Redis may sell them again. Reported for a person.
    ReturnedWhileOpen,
    /// A paid order whose stock a RELEASE row gave back in MySQL: the buyer paid for
    /// units the stock sells again. Reported for a person, critical.
    PaidButReleased,
}

impl DiscrepancyKind {
    /// Every kind, in the order a report explains them.
    pub const ALL: [Self; 9] = [
        Self::MissingOrder,
        Self::StockNotDeducted,
        Self::OrphanOrder,
        Self::RedisDrift,
        Self::MysqlDrift,
        Self::OverdueUnexpired,
        Self::UnitNotReturned,
        Self::ReturnedWhileOpen,
        Self::PaidButReleased,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingOrder => "missing_order",
            Self::StockNotDeducted => "stock_not_deducted",
            Self::OrphanOrder => "orphan_order",
            Self::RedisDrift => "redis_drift",
            Self::MysqlDrift => "mysql_drift",
            Self::OverdueUnexpired => "overdue_unexpired",
            Self::UnitNotReturned => "unit_not_returned",
            Self::ReturnedWhileOpen => "returned_while_open",
            Self::PaidButReleased => "paid_but_released",
        }
    }
}

/// Classifies one token. A flow younger than the grace window is still on its way
/// (the message may be in the broker's check-back window) and is left alone.
///
/// An order without a flow is an orphan whether or not its stock was deducted: Redis never
/// reserved a unit for it, so deducting one in MySQL would take a unit Redis still sells.
/// Only an order whose flow vouches for it can be "stock not deducted".
///
/// An order MySQL cancelled or expired should have no flow: with one, its units were not
/// given back in Redis (whatever its stock_flow says: the close gave back only what was
/// taken). Without one it is as it should be. An order open or paid without a flow whose
/// tombstone says it was returned is not an orphan Redis never knew: Redis gave it back.
pub fn classify(facts: TokenFacts, now_ms: i64, grace_ms: i64) -> Option<DiscrepancyKind> {
    match (facts.flow, facts.order) {
        (Some(flow), None) if now_ms - flow.reserved_at_ms >= grace_ms => {
            Some(DiscrepancyKind::MissingOrder)
        }
        (_, None) => None,
        (Some(_), Some(status)) if status.returned_units() => {
            Some(DiscrepancyKind::UnitNotReturned)
        }
        (None, Some(status)) if status.returned_units() => None,
        (None, Some(_)) if facts.returned_in_redis.is_some() => {
            Some(DiscrepancyKind::ReturnedWhileOpen)
        }
        (None, Some(_)) => Some(DiscrepancyKind::OrphanOrder),
        (Some(_), Some(_)) if !facts.has_stock_flow => Some(DiscrepancyKind::StockNotDeducted),
        (Some(_), Some(_)) => None,
    }
}

/// `stock + accounted == initial` must hold on each side; returns the gap when it does not.
/// Redis: stock + the units of the flows still in its hash (a returned order's flow left
/// it). MySQL: stock + the units of the orders neither cancelled nor expired.
pub fn drift(initial: i64, stock: i64, accounted: i64) -> Option<i64> {
    let gap = stock + accounted - initial;
    (gap != 0).then_some(gap)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: i64 = 60_000;

    fn flow(at: i64) -> Option<FlowFact> {
        Some(FlowFact {
            reserved_at_ms: at,
            state: FlowState::Committed,
        })
    }

    #[test]
    fn a_flow_without_an_order_is_missing_only_after_the_grace_window() {
        let facts = TokenFacts {
            flow: flow(0),
            ..Default::default()
        };
        assert_eq!(classify(facts, GRACE - 1, GRACE), None);
        assert_eq!(
            classify(facts, GRACE, GRACE),
            Some(DiscrepancyKind::MissingOrder)
        );
    }

    #[test]
    fn an_order_without_its_stock_flow_is_stock_not_deducted() {
        let facts = TokenFacts {
            flow: flow(0),
            order: Some(OrderStatus::Confirmed),
            has_stock_flow: false,
            ..Default::default()
        };
        assert_eq!(
            classify(facts, 0, GRACE),
            Some(DiscrepancyKind::StockNotDeducted)
        );
    }

    #[test]
    fn an_order_without_a_flow_is_an_orphan() {
        let facts = TokenFacts {
            flow: None,
            order: Some(OrderStatus::Confirmed),
            has_stock_flow: true,
            ..Default::default()
        };
        assert_eq!(
            classify(facts, 0, GRACE),
            Some(DiscrepancyKind::OrphanOrder)
        );
    }

    #[test]
    fn an_order_with_neither_a_flow_nor_a_stock_flow_is_an_orphan_not_a_deduction() {
        let facts = TokenFacts {
            flow: None,
            order: Some(OrderStatus::Confirmed),
            has_stock_flow: false,
            ..Default::default()
        };
        assert_eq!(
            classify(facts, 0, GRACE),
            Some(DiscrepancyKind::OrphanOrder)
        );
    }

    #[test]
    fn a_complete_order_is_no_discrepancy() {
        let facts = TokenFacts {
            flow: flow(0),
            order: Some(OrderStatus::Confirmed),
            has_stock_flow: true,
            ..Default::default()
        };
        assert_eq!(classify(facts, i64::MAX / 2, GRACE), None);
    }

    #[test]
    fn a_flow_whose_order_was_cancelled_or_expired_did_not_return_its_unit() {
        for status in [OrderStatus::Cancelled, OrderStatus::Expired] {
            for has_stock_flow in [true, false] {
                let facts = TokenFacts {
                    flow: flow(0),
                    order: Some(status),
                    has_stock_flow,
                    ..Default::default()
                };
                assert_eq!(
                    classify(facts, 0, GRACE),
                    Some(DiscrepancyKind::UnitNotReturned),
                    "{status} with stock_flow {has_stock_flow}"
                );
            }
        }
    }

    #[test]
    fn a_closed_order_without_a_flow_is_no_discrepancy() {
        for status in [OrderStatus::Cancelled, OrderStatus::Expired] {
            let facts = TokenFacts {
                order: Some(status),
                has_stock_flow: true,
                returned_in_redis: Some(Closing::Cancelled),
                ..Default::default()
            };
            assert_eq!(classify(facts, 0, GRACE), None, "{status}");
        }
    }

    #[test]
    fn an_open_or_paid_order_whose_units_redis_returned_is_returned_while_open() {
        for status in [OrderStatus::Confirmed, OrderStatus::Paid] {
            for closing in [Closing::Cancelled, Closing::Expired] {
                let facts = TokenFacts {
                    order: Some(status),
                    has_stock_flow: true,
                    returned_in_redis: Some(closing),
                    ..Default::default()
                };
                assert_eq!(
                    classify(facts, 0, GRACE),
                    Some(DiscrepancyKind::ReturnedWhileOpen),
                    "{status} returned as {closing}"
                );
            }
        }
    }

    #[test]
    fn a_paid_order_with_its_flow_is_no_discrepancy() {
        let facts = TokenFacts {
            flow: flow(0),
            order: Some(OrderStatus::Paid),
            has_stock_flow: true,
            ..Default::default()
        };
        assert_eq!(classify(facts, i64::MAX / 2, GRACE), None);
    }

    #[test]
    fn every_kind_has_its_own_word_and_serialises_as_it() {
        let words: std::collections::HashSet<_> =
            DiscrepancyKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(words.len(), DiscrepancyKind::ALL.len());
        for kind in DiscrepancyKind::ALL {
            assert_eq!(
                serde_json::to_string(&kind).unwrap(),
                format!("\"{}\"", kind.as_str())
            );
        }
    }

    #[test]
    fn drift_is_the_signed_gap() {
        assert_eq!(drift(100, 40, 60), None);
        assert_eq!(drift(100, 41, 60), Some(1));
        assert_eq!(drift(100, 40, 59), Some(-1));
    }
}
