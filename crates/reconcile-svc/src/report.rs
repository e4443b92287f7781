//! The run's report: JSON for `/api/v1/reconcile/runs/latest` and a table for the terminal.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use domain::reconcile::DiscrepancyKind;
use serde::{Deserialize, Serialize};

/// The most discrepancies a report lists; every one is in `reconcile_discrepancy` whatever
/// the report shows. A run after a lost broker can find hundreds of thousands, and its
/// report must still fit one row: MariaDB answers a statement larger than
/// `max_allowed_packet` (16 MiB by default) by closing the connection, which the run saw as
/// "Broken pipe" at its very end, after all its repairs.
pub const LISTED_DISCREPANCIES: usize = 1_000;

/// The most refunds due a product's report lists, for the same reason; its `refunds_due`
/// counts them all, and `payments` holds every one (outcome `refund_due`).
pub const LISTED_REFUNDS: usize = 1_000;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub run_id: u64,
    pub policy: String,
    pub started_at: String,
    pub finished_at: String,
    /// clean | repaired | unresolved | failed
    pub status: String,
    pub products: Vec<ProductReport>,
    /// The first [`LISTED_DISCREPANCIES`] found.
    pub discrepancies: Vec<Finding>,
    /// Every discrepancy found, listed or not.
    #[serde(default)]
    pub discrepancy_count: u64,
    /// Of those, the ones left as they were: reported, failed, or only planned by a dry run.
    #[serde(default)]
    pub unresolved_count: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProductReport {
    pub product_id: u64,
    pub initial_stock: i64,
    pub redis_stock: Option<i64>,
    pub mysql_stock: Option<i64>,
    pub flows: u64,
    pub flow_units: i64,
    pub orders: u64,
    pub ordered_units: i64,
    /// Flows younger than the grace window, left alone this run.
    pub in_flight: u64,
    /// Redis stock moved while the flows were scanned (a sale in progress): its drift
    /// was not judged this run.
    #[serde(default)]
    pub redis_live: bool,
    /// Paid orders and their units: sold for good.
    #[serde(default)]
    pub paid_orders: i64,
    #[serde(default)]
    pub paid_units: i64,
    /// Units of cancelled and expired orders, back in the stock (and on sale again).
    #[serde(default)]
    pub returned_units: i64,
    /// Payments that came for an order already ended: money to give back. Not a
    /// discrepancy (nothing is wrong with the stores), listed for a person to refund.
    #[serde(default)]
    pub refunds_due: i64,
    /// The first [`LISTED_REFUNDS`] of them, the oldest first.
    #[serde(default)]
    pub refunds: Vec<RefundDue>,
    pub found: BTreeMap<String, u64>,
}

/// A payment to give back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundDue {
    pub payment_id: String,
    pub order_token: String,
    pub amount_cents: u64,
    /// When the provider took the money (RFC 3339).
    pub paid_at: String,
}

/// One discrepancy and what was done about it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    pub product_id: u64,
    pub kind: DiscrepancyKind,
    pub order_token: Option<String>,
    pub action: Action,
    pub outcome: Outcome,
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Republish,
    Restore,
    Deduct,
    /// An overdue order ended as expired, in MySQL and then in Redis.
    Expire,
    /// The units of an order MySQL closed given back in Redis.
    Return,
    Report,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Repaired,
    /// Nothing to do by the time the repair ran (the live path settled it meanwhile).
    AlreadySettled,
    /// Left for a person: reported, or a repair that failed.
    Unresolved,
    /// A dry run: this is what a real run would do; nothing was changed.
    WouldRepair,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Republish => "republish",
            Self::Restore => "restore",
            Self::Deduct => "deduct",
            Self::Expire => "expire",
            Self::Return => "return",
            Self::Report => "report",
        }
    }
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Repaired => "repaired",
            Self::AlreadySettled => "already_settled",
            Self::Unresolved => "unresolved",
            Self::WouldRepair => "would_repair",
        }
    }
}

impl Report {
    /// An empty report of a run that starts now.
    pub fn new(run_id: u64, policy: &str, started_at: String) -> Self {
        Self {
            run_id,
            policy: policy.to_owned(),
            started_at,
            finished_at: String::new(),
            status: String::new(),
            products: Vec::new(),
            discrepancies: Vec::new(),
            discrepancy_count: 0,
            unresolved_count: 0,
        }
    }

    /// Counts `findings` and lists them while the list has room.
    pub fn add(&mut self, findings: impl IntoIterator<Item = Finding>) {
        for finding in findings {
            self.discrepancy_count += 1;
            if matches!(finding.outcome, Outcome::Unresolved | Outcome::WouldRepair) {
                self.unresolved_count += 1;
            }
            if self.discrepancies.len() < LISTED_DISCREPANCIES {
                self.discrepancies.push(finding);
            }
        }
    }

    /// Discrepancies left as they were: reported, failed, or only planned by a dry run.
    pub fn unresolved(&self) -> u64 {
        self.unresolved_count
    }

    /// A table a person reads at a glance.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "reconcile run {} · policy {} · {} → {} · {}",
            self.run_id, self.policy, self.started_at, self.finished_at, self.status
        );
        let _ = writeln!(
            out,
            "{:>10} {:>8} {:>8} {:>8} {:>7} {:>7} {:>9} {:>6} {:>8} {:>7}  discrepancies",
            "product",
            "initial",
            "redis",
            "mysql",
            "flows",
            "orders",
            "in-flight",
            "paid",
            "returned",
            "refunds"
        );
        let show = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
        for p in &self.products {
            let found = if p.found.is_empty() {
                "none".to_owned()
            } else {
                p.found
                    .iter()
                    .map(|(k, n)| format!("{k}={n}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let _ = writeln!(
                out,
                "{:>10} {:>8} {:>8} {:>8} {:>7} {:>7} {:>9} {:>6} {:>8} {:>7}  {found}",
                p.product_id,
                p.initial_stock,
                show(p.redis_stock),
                show(p.mysql_stock),
                p.flows,
                p.orders,
                p.in_flight,
                p.paid_units,
                p.returned_units,
                p.refunds_due
            );
        }
        self.refunds_table(&mut out);
        if !self.discrepancies.is_empty() {
            let _ = writeln!(
                out,
                "\n{:<20} {:<44} {:<10} {:<16} detail",
                "kind", "order token", "action", "outcome"
            );
            for f in &self.discrepancies {
                let _ = writeln!(
                    out,
                    "{:<20} {:<44} {:<10} {:<16} {}",
                    f.kind.as_str(),
                    f.order_token.as_deref().unwrap_or("-"),
                    f.action.as_str(),
                    f.outcome.as_str(),
                    f.detail
                );
            }
        }
        let unlisted = self.discrepancy_count - self.discrepancies.len() as u64;
        if unlisted > 0 {
            let _ = writeln!(
                out,
                "… and {unlisted} more, in reconcile_discrepancy (run_id {})",
                self.run_id
            );
        }
        let _ = writeln!(
            out,
            "{} discrepancies, {} unresolved",
            self.discrepancy_count,
            self.unresolved()
        );
        out
    }

    /// The refunds due, by product: not discrepancies, so apart from them.
    fn refunds_table(&self, out: &mut String) {
        let due: Vec<_> = self.products.iter().filter(|p| p.refunds_due > 0).collect();
        if due.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nrefunds due (payments for orders already ended: money to give back)"
        );
        let _ = writeln!(
            out,
            "{:>10} {:<40} {:<44} {:>12} paid at",
            "product", "payment id", "order token", "cents"
        );
        for p in due {
            for r in &p.refunds {
                let _ = writeln!(
                    out,
                    "{:>10} {:<40} {:<44} {:>12} {}",
                    p.product_id, r.payment_id, r.order_token, r.amount_cents, r.paid_at
                );
            }
            let unlisted = p.refunds_due - p.refunds.len() as i64;
            if unlisted > 0 {
                let _ = writeln!(
                    out,
                    "{:>10} … and {unlisted} more, in payments (outcome refund_due)",
                    p.product_id
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing_order(n: usize, outcome: Outcome) -> Finding {
        Finding {
            product_id: 7,
            kind: DiscrepancyKind::MissingOrder,
            order_token: Some(format!("7-{n:032x}")),
            action: Action::Republish,
            outcome,
            detail: "x".repeat(200),
        }
    }

    #[test]
    fn a_report_lists_the_first_thousand_discrepancies_and_counts_them_all() {
        let mut report = Report::new(1, "republish", "now".into());
        let extra = 500;
        report.add((0..LISTED_DISCREPANCIES).map(|n| missing_order(n, Outcome::Repaired)));
        report.add((0..extra).map(|n| missing_order(n, Outcome::Unresolved)));

        assert_eq!(report.discrepancies.len(), LISTED_DISCREPANCIES);
        assert_eq!(
            report.discrepancy_count,
            (LISTED_DISCREPANCIES + extra) as u64
        );
        assert_eq!(report.unresolved(), extra as u64);
        let table = report.to_table();
        assert!(table.contains("… and 500 more"), "{table}");
        assert!(
            table.contains("1500 discrepancies, 500 unresolved"),
            "{table}"
        );
    }

    #[test]
    fn refunds_due_are_listed_apart_from_the_discrepancies() {
        let mut report = Report::new(1, "republish", "now".into());
        report.products.push(ProductReport {
            product_id: 7,
            refunds_due: 2,
            refunds: vec![RefundDue {
                payment_id: "pay-late-1".into(),
                order_token: "7-0000".into(),
                amount_cents: 1999,
                paid_at: "2024-05-01T10:00:00.000Z".into(),
            }],
            ..ProductReport::default()
        });
        let table = report.to_table();
        assert!(table.contains("refunds due"), "{table}");
        assert!(table.contains("pay-late-1"), "{table}");
        assert!(table.contains("… and 1 more"), "{table}");
        assert!(table.contains("0 discrepancies, 0 unresolved"), "{table}");
    }
}
