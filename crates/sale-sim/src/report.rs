//! What a sale did, the invariants it must keep, and the summary a person reads.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use crate::after_sale::AfterSaleReport;

/// The outcome key of a purchase the gateway accepted (202).
pub const ACCEPTED: &str = "ACCEPTED";
/// The one refusal a sale is expected to give once the stock is gone.
pub const SOLD_OUT: &str = "SOLD_OUT";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SaleReport {
    pub product_id: u64,
    /// Units put on sale.
    pub stock: i64,
    pub buyers: u32,
    /// Purchases answered 202.
    pub accepted: u64,
    /// Every buyer's outcome by code, `ACCEPTED` included, so the counts sum to `buyers`.
    /// A buyer whose token request failed is counted under that request's code.
    pub outcomes: BTreeMap<String, u64>,
    /// The codes in `outcomes` that came with a 5xx, no answer at all, or an unreadable
    /// success: failures of the service, as opposed to answers of the sale.
    pub failure_codes: BTreeSet<String>,
    /// The first message seen for each code other than ACCEPTED and SOLD_OUT: where to
    /// start looking when one of them shows up.
    pub refusal_messages: BTreeMap<String, String>,
    /// Buyers who never got a purchase token (their outcome is the token request's code).
    pub token_failures: u64,
    pub orders_in_mysql: i64,
    pub redis_stock: Option<i64>,
    pub mysql_stock: Option<i64>,
    /// Flow records in Redis: one per unit reserved and not given back.
    pub flows: u64,
    /// From the first buyer's first request to the last buyer's last answer.
    pub sale_seconds: f64,
    /// From the first purchase until MySQL held every accepted order (observed by polling
    /// every 100 ms); `None` when it never did within the drain timeout.
    pub drain_seconds: Option<f64>,
    /// HTTP requests the crowd sent (tokens and purchases).
    pub requests: u64,
    pub requests_per_sec: f64,
    /// Purchase requests answered (accepted or refused).
    pub purchases: u64,
    /// From the first purchase sent to the last purchase answered; `None` without purchases.
    pub purchase_seconds: Option<f64>,
    /// `purchases / purchase_seconds`: the purchase rate the gateway sustained.
    pub purchases_per_sec: Option<f64>,
    /// From the crowd's first request until MySQL held every accepted order (the units
    /// sold per second of a whole sale is `accepted / sell_seconds`); `None` when never.
    pub sell_seconds: Option<f64>,
    /// The open-loop purchase rate asked for (`--rate`); `None` for a closed-loop crowd.
    pub target_rate: Option<f64>,
    /// Every purchase's answer time; `None` when no buyer got as far as a purchase.
    pub purchase_latency_ms: Option<Percentiles>,
    /// The accepted purchases' alone: they take the whole path (Redis reservation and the
    /// broker's transactional send), where most refusals stop at the sold-out flag.
    pub accepted_latency_ms: Option<Percentiles>,
    pub confirmed_sample: SampleCheck,
    /// Every invariant broken, the after-sale's included.
    pub violations: Vec<String>,
    /// What happened after the click, when the sale was asked to go on after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_sale: Option<AfterSaleReport>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    /// The tail a latency curve needs: one answer in a thousand is slower.
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of unsorted samples; `None` for no samples.
    pub fn of(mut samples: Vec<f64>) -> Option<Self> {
        samples.sort_by(f64::total_cmp);
        Some(Self {
            p50: percentile(&samples, 50.0)?,
            p90: percentile(&samples, 90.0)?,
            p99: percentile(&samples, 99.0)?,
            p999: percentile(&samples, 99.9)?,
            max: *samples.last()?,
        })
    }
}

/// The `p`th percentile (0 < p ≤ 100) of sorted samples by nearest rank: the smallest
/// sample with at least p % of the samples at or below it. `None` for no samples.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Sampled accepted orders, asked for by their buyer once MySQL held them all.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SampleCheck {
    pub ok: u32,
    pub checked: u32,
    /// One line per sampled order that was not confirmed: its token and what came back.
    pub problems: Vec<String>,
}

impl SaleReport {
    /// What must hold after a sale of `stock` units, one unit per buyer; empty when all do.
    /// Refusals other than SOLD_OUT are violations only when they are failures of the
    /// service (5xx, no answer): a rate limit is the gateway doing its job, and is reported.
    pub fn check_invariants(&self, stock: i64) -> Vec<String> {
        let mut violations = Vec::new();
        let accepted = i64::try_from(self.accepted).unwrap_or(i64::MAX);
        if accepted > stock {
            violations.push(format!(
                "oversold: {accepted} purchases accepted for {stock} units"
            ));
        } else if i64::from(self.buyers) >= stock && accepted < stock {
            violations.push(format!(
                "undersold: {accepted} purchases accepted for {stock} units with {} buyers",
                self.buyers
            ));
        }
        if self.orders_in_mysql != accepted {
            violations.push(format!(
                "{} orders in MySQL for {accepted} accepted purchases{}",
                self.orders_in_mysql,
                if self.drain_seconds.is_none() {
                    " (not drained within the timeout)"
                } else {
                    ""
                }
            ));
        }
        let left = stock - accepted;
        for (store, value) in [("Redis", self.redis_stock), ("MySQL", self.mysql_stock)] {
            match value {
                Some(value) if value == left => {}
                Some(value) => violations.push(format!(
                    "{store} stock is {value}, expected {left} ({stock} − {accepted} accepted)"
                )),
                None => violations.push(format!("{store} has no stock for the product")),
            }
        }
        if i64::try_from(self.flows).unwrap_or(i64::MAX) != accepted {
            violations.push(format!(
                "{} flow records in Redis for {accepted} accepted purchases",
                self.flows
            ));
        }
        for (code, count) in &self.outcomes {
            if self.failure_codes.contains(code) {
                violations.push(format!("{count} buyers failed with {code}"));
            }
        }
        let sample = &self.confirmed_sample;
        if sample.ok < sample.checked {
            let example = sample
                .problems
                .first()
                .map_or_else(String::new, |p| format!(" (e.g. {p})"));
            violations.push(format!(
                "{} of {} sampled orders not confirmed{example}",
                sample.checked - sample.ok,
                sample.checked
            ));
        }
        violations
    }

    /// Refusals other than SOLD_OUT, by code.
    pub fn other_refusals(&self) -> impl Iterator<Item = (&str, u64)> {
        self.outcomes
            .iter()
            .filter(|(code, _)| *code != ACCEPTED && *code != SOLD_OUT)
            .map(|(code, count)| (code.as_str(), *count))
    }

    fn count(&self, code: &str) -> u64 {
        self.outcomes.get(code).copied().unwrap_or(0)
    }
}

/// The human summary: one line per fact, readable at a glance.
impl fmt::Display for SaleReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "sale of product {}: {} buyers, {} units",
            self.product_id, self.buyers, self.stock
        )?;
        writeln!(f, "  accepted        {:>6}", self.accepted)?;
        writeln!(f, "  sold out        {:>6}", self.count(SOLD_OUT))?;
        let others: Vec<String> = self
            .other_refusals()
            .map(|(code, count)| format!("{code} {count}"))
            .collect();
        let others = match (others.is_empty(), self.token_failures) {
            (true, _) => "(none)".to_owned(),
            (false, 0) => others.join(" · "),
            (false, n) => format!(
                "{}   ({n} of them at the token request)",
                others.join(" · ")
            ),
        };
        writeln!(f, "  other refusals  {others}")?;
        for (code, message) in &self.refusal_messages {
            writeln!(f, "                    {code}: {message}")?;
        }
        let drain = match self.drain_seconds {
            Some(secs) => format!("(drained {secs:.2} s after the first purchase)"),
            None => "(NOT drained within the timeout)".to_owned(),
        };
        writeln!(f, "  orders in MySQL {:>6}   {drain}", self.orders_in_mysql)?;
        let stock = |v: Option<i64>| v.map_or_else(|| "none".to_owned(), |v| v.to_string());
        writeln!(
            f,
            "  stock left      Redis {} · MySQL {} · {} flows in Redis",
            stock(self.redis_stock),
            stock(self.mysql_stock),
            self.flows
        )?;
        writeln!(
            f,
            "  crowd           {} buyers in {:.2} s · {:.0} requests/s",
            self.buyers, self.sale_seconds, self.requests_per_sec
        )?;
        if let (Some(secs), Some(rate)) = (self.purchase_seconds, self.purchases_per_sec) {
            let target = self
                .target_rate
                .map_or_else(String::new, |r| format!(" (open loop at {r:.0}/s)"));
            writeln!(
                f,
                "  purchases       {} in {secs:.2} s · {rate:.0} purchases/s{target}",
                self.purchases
            )?;
        }
        match (&self.purchase_latency_ms, &self.accepted_latency_ms) {
            (None, _) => writeln!(f, "  purchase        none was sent")?,
            (Some(all), accepted) => {
                writeln!(f, "  purchase        {all}")?;
                if let Some(accepted) = accepted {
                    writeln!(f, "    accepted ones {accepted}")?;
                }
            }
        }
        writeln!(
            f,
            "  status checks   {}/{} confirmed",
            self.confirmed_sample.ok, self.confirmed_sample.checked
        )?;
        if let Some(after_sale) = &self.after_sale {
            write!(f, "{after_sale}")?;
        }
        if self.violations.is_empty() {
            writeln!(f, "  invariants      all hold")
        } else {
            writeln!(f, "  invariants      {} VIOLATED:", self.violations.len())?;
            for violation in &self.violations {
                writeln!(f, "    ✗ {violation}")?;
            }
            Ok(())
        }
    }
}

impl fmt::Display for Percentiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "p50 {} ms · p90 {} ms · p99 {} ms · p99.9 {} ms · max {} ms",
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            ms(self.p999),
            ms(self.max)
        )
    }
}

/// Milliseconds with one decimal below 10 ms, whole above: as precise as they are useful.
fn ms(value: f64) -> String {
    if value < 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clean sale of 100 units to 300 buyers.
    fn clean() -> SaleReport {
        SaleReport {
            product_id: 7,
            stock: 100,
            buyers: 300,
            accepted: 100,
            outcomes: BTreeMap::from([(ACCEPTED.into(), 100), (SOLD_OUT.into(), 200)]),
            failure_codes: BTreeSet::new(),
            refusal_messages: BTreeMap::new(),
            token_failures: 0,
            orders_in_mysql: 100,
            redis_stock: Some(0),
            mysql_stock: Some(0),
            flows: 100,
            sale_seconds: 1.0,
            drain_seconds: Some(0.5),
            requests: 600,
            requests_per_sec: 600.0,
            purchases: 300,
            purchase_seconds: Some(0.5),
            purchases_per_sec: Some(600.0),
            sell_seconds: Some(1.5),
            target_rate: None,
            purchase_latency_ms: Percentiles::of(vec![1.0, 2.0, 3.0]),
            accepted_latency_ms: Percentiles::of(vec![3.0]),
            confirmed_sample: SampleCheck {
                ok: 20,
                checked: 20,
                problems: vec![],
            },
            violations: vec![],
            after_sale: None,
        }
    }

    #[test]
    fn a_clean_sale_keeps_every_invariant() {
        assert_eq!(clean().check_invariants(100), Vec::<String>::new());
    }

    #[test]
    fn selling_more_than_the_stock_is_oversold() {
        let mut report = clean();
        report.accepted = 101;
        report.orders_in_mysql = 101;
        report.flows = 101;
        report.redis_stock = Some(-1);
        report.mysql_stock = Some(-1);
        let violations = report.check_invariants(100);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].starts_with("oversold"));
    }

    #[test]
    fn stock_left_unsold_to_enough_buyers_is_undersold() {
        let mut report = clean();
        report.accepted = 99;
        report.orders_in_mysql = 99;
        report.flows = 99;
        report.redis_stock = Some(1);
        report.mysql_stock = Some(1);
        let violations = report.check_invariants(100);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].starts_with("undersold"));
    }

    #[test]
    fn fewer_buyers_than_units_may_leave_stock() {
        let mut report = clean();
        report.buyers = 50;
        report.accepted = 50;
        report.outcomes = BTreeMap::from([(ACCEPTED.into(), 50)]);
        report.orders_in_mysql = 50;
        report.flows = 50;
        report.redis_stock = Some(50);
        report.mysql_stock = Some(50);
        assert_eq!(report.check_invariants(100), Vec::<String>::new());
    }

    #[test]
    fn orders_missing_from_mysql_are_a_violation() {
        let mut report = clean();
        report.orders_in_mysql = 98;
        report.drain_seconds = None;
        let violations = report.check_invariants(100);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].contains("98 orders in MySQL"));
        assert!(violations[0].contains("not drained"));
    }

    #[test]
    fn stock_that_disagrees_with_the_sales_is_a_violation_in_each_store() {
        let mut report = clean();
        report.redis_stock = Some(1);
        report.mysql_stock = None;
        let violations = report.check_invariants(100);
        assert_eq!(violations.len(), 2, "{violations:?}");
        assert!(violations[0].starts_with("Redis stock is 1, expected 0"));
        assert!(violations[1].starts_with("MySQL has no stock"));
    }

    #[test]
    fn flows_that_disagree_with_the_sales_are_a_violation() {
        let mut report = clean();
        report.flows = 101;
        assert_eq!(report.check_invariants(100).len(), 1);
    }

    #[test]
    fn rate_limits_are_reported_but_server_errors_are_violations() {
        let mut report = clean();
        report.outcomes.insert(SOLD_OUT.into(), 195);
        report.outcomes.insert("RATE_LIMITED".into(), 3);
        report.outcomes.insert("UNAVAILABLE".into(), 2);
        report.failure_codes.insert("UNAVAILABLE".into());
        assert_eq!(
            report.check_invariants(100),
            vec!["2 buyers failed with UNAVAILABLE".to_owned()]
        );
        assert_eq!(
            report.other_refusals().collect::<Vec<_>>(),
            vec![("RATE_LIMITED", 3), ("UNAVAILABLE", 2)]
        );
    }

    #[test]
    fn an_unconfirmed_sampled_order_is_a_violation_with_its_detail() {
        let mut report = clean();
        report.confirmed_sample = SampleCheck {
            ok: 19,
            checked: 20,
            problems: vec!["7-abc (user 3): queued".into()],
        };
        assert_eq!(
            report.check_invariants(100),
            vec!["1 of 20 sampled orders not confirmed (e.g. 7-abc (user 3): queued)".to_owned()]
        );
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&samples, 50.0), Some(50.0));
        assert_eq!(percentile(&samples, 90.0), Some(90.0));
        assert_eq!(percentile(&samples, 99.0), Some(99.0));
        assert_eq!(percentile(&samples, 99.9), Some(100.0));
        assert_eq!(percentile(&samples, 100.0), Some(100.0));
        assert_eq!(percentile(&[4.0], 99.0), Some(4.0));
        assert_eq!(percentile(&[1.0, 2.0], 50.0), Some(1.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 1.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn percentiles_of_unsorted_samples_sort_them_first() {
        let p = Percentiles::of(vec![9.0, 1.0, 5.0, 3.0, 7.0]).unwrap();
        assert_eq!(
            (p.p50, p.p90, p.p99, p.p999, p.max),
            (5.0, 9.0, 9.0, 9.0, 9.0)
        );
        assert_eq!(Percentiles::of(vec![]), None);
    }

    #[test]
    fn the_summary_lists_refusals_and_violations() {
        let mut report = clean();
        report.outcomes.insert("RATE_LIMITED".into(), 3);
        report.violations = vec!["something broke".into()];
        let text = report.to_string();
        assert!(text.contains("other refusals  RATE_LIMITED 3"), "{text}");
        assert!(text.contains("✗ something broke"), "{text}");
        assert!(clean().to_string().contains("invariants      all hold"));
    }
}
