//! How reconcile tells one order token's records apart, and what a product's totals must
//! add up to. Pure rules: the reconcile service gathers the facts and applies the repairs.

use serde::{Deserialize, Serialize};

use crate::flow::FlowState;

/// What Redis and MySQL hold for one order token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenFacts {
    pub flow: Option<FlowFact>,
    pub has_order: bool,
    pub has_stock_flow: bool,
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
}

impl DiscrepancyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingOrder => "missing_order",
            Self::StockNotDeducted => "stock_not_deducted",
            Self::OrphanOrder => "orphan_order",
            Self::RedisDrift => "redis_drift",
            Self::MysqlDrift => "mysql_drift",
        }
    }
}

/// Classifies one token. A flow younger than the grace window is still on its way
/// (the message may be in the broker's check-back window) and is left alone.
///
/// An order without a flow is an orphan whether or not its stock was deducted: Redis never
/// reserved a unit for it, so deducting one in MySQL would take a unit Redis still sells.
/// Only an order whose flow vouches for it can be "stock not deducted".
pub fn classify(facts: TokenFacts, now_ms: i64, grace_ms: i64) -> Option<DiscrepancyKind> {
    match (facts.flow, facts.has_order) {
        (Some(flow), false) if now_ms - flow.reserved_at_ms >= grace_ms => {
            Some(DiscrepancyKind::MissingOrder)
        }
        (Some(_), false) | (None, false) => None,
        (None, true) => Some(DiscrepancyKind::OrphanOrder),
        (Some(_), true) if !facts.has_stock_flow => Some(DiscrepancyKind::StockNotDeducted),
        (Some(_), true) => None,
    }
}

/// `stock + accounted == initial` must hold on each side; returns the gap when it does not.
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
            has_order: true,
            has_stock_flow: false,
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
            has_order: true,
            has_stock_flow: true,
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
            has_order: true,
            has_stock_flow: false,
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
            has_order: true,
            has_stock_flow: true,
        };
        assert_eq!(classify(facts, i64::MAX / 2, GRACE), None);
    }

    #[test]
    fn drift_is_the_signed_gap() {
        assert_eq!(drift(100, 40, 60), None);
        assert_eq!(drift(100, 41, 60), Some(1));
        assert_eq!(drift(100, 40, 59), Some(-1));
    }
}
