//! What the after-sale did, the invariants the order lifecycle must keep, and its part of
//! the summary. Every order of a simulated sale is of one unit, so orders and units are
//! counted alike.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

/// The longest a stream may lag behind the change it reports.
pub const STREAM_DELAY_LIMIT_MS: f64 = 1000.0;
/// How many unexpected answers the summary spells out.
const PROBLEMS_SHOWN: usize = 5;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AfterSaleReport {
    pub price_cents: u64,
    pub seed: u64,
    /// First-wave orders read `confirmed` (in MySQL, awaiting payment): the ones given a fate.
    pub confirmed: u64,
    /// How many of them were to pay, cancel and abandon.
    pub planned: Planned,
    /// Payments answered 200 `paid`.
    pub paid: u64,
    /// Cancels answered 200 `cancelled`.
    pub cancelled: u64,
    /// Abandoned orders seen `expired`.
    pub expired: u64,
    /// Payments sent for orders that had expired.
    pub late_payments: u64,
    /// Late payments answered 409 `ORDER_CLOSED`: refunds the gateway owes.
    pub refunds_due: u64,
    /// Payments whose callback was sent a second time.
    pub duplicate_callbacks: u64,
    /// Second callbacks answered exactly as the first.
    pub duplicates_answered_same: u64,
    pub forged_callbacks: u64,
    /// Forged callbacks answered 401 with the order left as it was.
    pub forged_refused: u64,
    pub streams: StreamCheck,
    /// `None` when no unit came back to sell again, or the wave could not run.
    pub second_wave: Option<SecondWave>,
    /// The product read at the end; `None` when it could not be read.
    pub final_state: Option<FinalState>,
    /// No order token was handed out twice, over both waves.
    pub all_tokens_distinct: bool,
    /// One line per answer that was not the one expected: which request, what came back.
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Planned {
    pub pay: u64,
    pub cancel: u64,
    pub abandon: u64,
}

/// The orders followed on their event stream.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StreamCheck {
    pub watched: u64,
    /// Streams that showed `confirmed` first and the order's final status last.
    pub saw_final: u64,
    /// The longest from a change (as its own request learnt of it) to the stream's event.
    pub worst_delay_ms: Option<f64>,
    pub problems: Vec<String>,
}

/// The crowd sent after the returned units.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SecondWave {
    pub buyers: u32,
    /// Units back on sale when it started: cancelled and expired ones.
    pub returned: u64,
    /// Purchases answered 202.
    pub accepted: u64,
    /// Every buyer's outcome by code, as in the first wave.
    pub outcomes: BTreeMap<String, u64>,
    /// The codes in `outcomes` that were failures of the service (5xx, no answer).
    pub failure_codes: BTreeSet<String>,
    /// Its orders read confirmed (MySQL holds them).
    pub confirmed: u64,
    /// Its orders answered `paid`.
    pub paid: u64,
}

/// `GET /admin/v1/products/{id}` at the end; a count the gateway does not report is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FinalState {
    pub initial_stock: Option<i64>,
    pub redis_stock: Option<i64>,
    pub mysql_stock: Option<i64>,
    pub orders: i64,
    pub paid: Option<i64>,
    pub returned: Option<i64>,
    pub refunds_due: Option<i64>,
}

impl AfterSaleReport {
    /// What must hold after the after-sale of a sale whose first wave had `first_wave`
    /// accepted orders; empty when all does.
    pub fn check_invariants(&self, first_wave: u64) -> Vec<String> {
        let mut violations = Vec::new();
        let mut expect = |what: &str, got: u64, wanted: u64| {
            if got != wanted {
                violations.push(format!("{what}: {got} of {wanted}"));
            }
        };
        expect(
            "first-wave orders read confirmed",
            self.confirmed,
            first_wave,
        );
        expect("payments answered paid", self.paid, self.planned.pay);
        expect(
            "cancels answered cancelled",
            self.cancelled,
            self.planned.cancel,
        );
        expect(
            "abandoned orders expired",
            self.expired,
            self.planned.abandon,
        );
        expect(
            "late payments answered ORDER_CLOSED (refund due)",
            self.refunds_due,
            self.late_payments,
        );
        expect(
            "duplicate callbacks answered the same",
            self.duplicates_answered_same,
            self.duplicate_callbacks,
        );
        expect(
            "forged callbacks refused with nothing changed",
            self.forged_refused,
            self.forged_callbacks,
        );
        expect(
            "event streams that showed confirmed then the final status",
            self.streams.saw_final,
            self.streams.watched,
        );
        if let Some(worst) = self.streams.worst_delay_ms
            && worst > STREAM_DELAY_LIMIT_MS
        {
            violations.push(format!(
                "an event stream lagged {worst:.0} ms behind its change (limit {STREAM_DELAY_LIMIT_MS:.0} ms)"
            ));
        }
        let returned = self.cancelled + self.expired;
        let resold = self.second_wave.as_ref().map_or(0, |wave| wave.accepted);
        if let Some(wave) = &self.second_wave {
            if wave.accepted > wave.returned {
                violations.push(format!(
                    "second wave oversold: {} purchases accepted for {} returned units",
                    wave.accepted, wave.returned
                ));
            } else if u64::from(wave.buyers) >= wave.returned && wave.accepted < wave.returned {
                violations.push(format!(
                    "second wave undersold: {} of {} returned units sold again to {} buyers",
                    wave.accepted, wave.returned, wave.buyers
                ));
            }
            let mut expect = |what: &str, got: u64, wanted: u64| {
                if got != wanted {
                    violations.push(format!("{what}: {got} of {wanted}"));
                }
            };
            expect(
                "second-wave orders read confirmed",
                wave.confirmed,
                wave.accepted,
            );
            expect("second-wave orders paid", wave.paid, wave.accepted);
            for code in &wave.failure_codes {
                let count = wave.outcomes.get(code).copied().unwrap_or(0);
                violations.push(format!("{count} second-wave buyers failed with {code}"));
            }
        }
        if !self.all_tokens_distinct {
            violations.push("an order token was handed out twice".to_owned());
        }
        match &self.final_state {
            None => violations.push("the product could not be read at the end".to_owned()),
            Some(state) => self.check_final(state, first_wave, returned, resold, &mut violations),
        }
        violations
    }

    fn check_final(
        &self,
        state: &FinalState,
        first_wave: u64,
        returned: u64,
        resold: u64,
        violations: &mut Vec<String>,
    ) {
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let paid = self.paid + self.second_wave.as_ref().map_or(0, |wave| wave.paid);
        // Units held by orders that are neither cancelled nor expired, over both waves.
        let live = int(first_wave + resold) - int(returned);
        let mut expect = |what: &str, got: Option<i64>, wanted: i64| match got {
            Some(got) if got == wanted => {}
            Some(got) => violations.push(format!("{what} is {got}, expected {wanted}")),
            None => violations.push(format!("the gateway does not report {what}")),
        };
        expect(
            "Redis stock at the end",
            state.redis_stock,
            int(returned) - int(resold),
        );
        expect("order rows", Some(state.orders), int(first_wave + resold));
        expect("units returned", state.returned, int(returned));
        expect("units paid", state.paid, int(paid));
        expect("refunds due", state.refunds_due, int(self.late_payments));
        match (state.initial_stock, state.mysql_stock) {
            (Some(initial), Some(mysql)) => {
                if mysql + live != initial {
                    violations.push(format!(
                        "MySQL stock {mysql} + {live} units of live orders is not the initial {initial}"
                    ));
                }
                if live > initial {
                    violations.push(format!(
                        "oversold: {live} units in live orders for {initial} units"
                    ));
                }
            }
            (None, _) => violations.push("the gateway does not report initial_stock".to_owned()),
            (_, None) => violations.push("MySQL has no stock for the product".to_owned()),
        }
    }
}

impl fmt::Display for AfterSaleReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "after the sale: price {}.{:02} · split seed {}",
            self.price_cents / 100,
            self.price_cents % 100,
            self.seed
        )?;
        writeln!(
            f,
            "  wave 1 orders   {} confirmed: paid {} · cancelled {} · expired {} (of {} abandoned)",
            self.confirmed, self.paid, self.cancelled, self.expired, self.planned.abandon
        )?;
        writeln!(
            f,
            "  callbacks       duplicated {}, {} answered the same · forged {}, {} refused · late {}, {} refunds due",
            self.duplicate_callbacks,
            self.duplicates_answered_same,
            self.forged_callbacks,
            self.forged_refused,
            self.late_payments,
            self.refunds_due
        )?;
        let worst = self.streams.worst_delay_ms.map_or_else(
            || "no delay measured".to_owned(),
            |ms| format!("worst delay {ms:.0} ms"),
        );
        writeln!(
            f,
            "  event streams   {} watched, {} saw their final status · {worst}",
            self.streams.watched, self.streams.saw_final
        )?;
        match &self.second_wave {
            None => writeln!(f, "  second wave     not run")?,
            Some(wave) => writeln!(
                f,
                "  second wave     {} buyers · {} of {} returned units sold again · {} paid",
                wave.buyers, wave.accepted, wave.returned, wave.paid
            )?,
        }
        if let Some(state) = &self.final_state {
            let n = |v: Option<i64>| v.map_or_else(|| "?".to_owned(), |v| v.to_string());
            writeln!(
                f,
                "  at the end      initial {} · Redis {} · MySQL {} · {} orders · paid {} · returned {} · refunds due {}",
                n(state.initial_stock),
                n(state.redis_stock),
                n(state.mysql_stock),
                state.orders,
                n(state.paid),
                n(state.returned),
                n(state.refunds_due)
            )?;
        }
        let problems: Vec<&String> = self.problems.iter().chain(&self.streams.problems).collect();
        for problem in problems.iter().take(PROBLEMS_SHOWN) {
            writeln!(f, "    ! {problem}")?;
        }
        if problems.len() > PROBLEMS_SHOWN {
            writeln!(f, "    ! … and {} more", problems.len() - PROBLEMS_SHOWN)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 100 orders sold: 70 paid (7 callbacks twice), 15 cancelled, 15 expired of which 3
    /// paid late, and the 30 units that came back sold again and paid.
    fn clean() -> AfterSaleReport {
        AfterSaleReport {
            price_cents: 1999,
            seed: 42,
            confirmed: 100,
            planned: Planned {
                pay: 70,
                cancel: 15,
                abandon: 15,
            },
            paid: 70,
            cancelled: 15,
            expired: 15,
            late_payments: 3,
            refunds_due: 3,
            duplicate_callbacks: 7,
            duplicates_answered_same: 7,
            forged_callbacks: 2,
            forged_refused: 2,
            streams: StreamCheck {
                watched: 20,
                saw_final: 20,
                worst_delay_ms: Some(40.0),
                problems: vec![],
            },
            second_wave: Some(SecondWave {
                buyers: 120,
                returned: 30,
                accepted: 30,
                outcomes: BTreeMap::from([("ACCEPTED".into(), 30), ("SOLD_OUT".into(), 90)]),
                failure_codes: BTreeSet::new(),
                confirmed: 30,
                paid: 30,
            }),
            final_state: Some(FinalState {
                initial_stock: Some(100),
                redis_stock: Some(0),
                mysql_stock: Some(0),
                orders: 130,
                paid: Some(100),
                returned: Some(30),
                refunds_due: Some(3),
            }),
            all_tokens_distinct: true,
            problems: vec![],
        }
    }

    fn state(report: &mut AfterSaleReport) -> &mut FinalState {
        report.final_state.as_mut().unwrap()
    }

    #[test]
    fn a_clean_story_keeps_every_invariant() {
        assert_eq!(clean().check_invariants(100), Vec::<String>::new());
    }

    #[test]
    fn a_returned_unit_not_sold_again_leaves_stock_in_redis() {
        let mut report = clean();
        let wave = report.second_wave.as_mut().unwrap();
        wave.accepted = 29;
        wave.confirmed = 29;
        wave.paid = 29;
        let state = state(&mut report);
        state.redis_stock = Some(1);
        state.mysql_stock = Some(1);
        state.orders = 129;
        state.paid = Some(99);
        assert_eq!(
            report.check_invariants(100),
            vec!["second wave undersold: 29 of 30 returned units sold again to 120 buyers"]
        );
    }

    #[test]
    fn a_unit_sold_twice_breaks_the_stock_arithmetic() {
        let mut report = clean();
        let state = state(&mut report);
        state.redis_stock = Some(-1);
        state.mysql_stock = Some(-1);
        let violations = report.check_invariants(100);
        assert!(violations.contains(&"Redis stock at the end is -1, expected 0".to_owned()));
        assert!(
            violations.contains(
                &"MySQL stock -1 + 100 units of live orders is not the initial 100".to_owned()
            ),
            "{violations:?}"
        );
    }

    #[test]
    fn the_gateways_counts_must_match_what_the_buyers_and_the_provider_did() {
        let mut report = clean();
        let state = state(&mut report);
        state.returned = Some(29);
        state.paid = Some(101);
        state.refunds_due = Some(0);
        assert_eq!(
            report.check_invariants(100),
            vec![
                "units returned is 29, expected 30",
                "units paid is 101, expected 100",
                "refunds due is 0, expected 3",
            ]
        );
    }

    #[test]
    fn a_gateway_without_the_lifecycle_counts_is_a_violation_not_a_pass() {
        let mut report = clean();
        let state = state(&mut report);
        state.paid = None;
        state.initial_stock = None;
        assert_eq!(
            report.check_invariants(100),
            vec![
                "the gateway does not report units paid",
                "the gateway does not report initial_stock",
            ]
        );
    }

    #[test]
    fn every_callback_case_is_held_to_its_answer() {
        let mut report = clean();
        report.duplicates_answered_same = 6;
        report.forged_refused = 1;
        report.refunds_due = 2;
        assert_eq!(
            report.check_invariants(100),
            vec![
                "late payments answered ORDER_CLOSED (refund due): 2 of 3",
                "duplicate callbacks answered the same: 6 of 7",
                "forged callbacks refused with nothing changed: 1 of 2",
            ]
        );
    }

    #[test]
    fn a_stream_that_missed_its_end_or_lagged_is_a_violation() {
        let mut report = clean();
        report.streams.saw_final = 19;
        report.streams.worst_delay_ms = Some(1500.0);
        assert_eq!(report.check_invariants(100).len(), 2);
    }

    #[test]
    fn an_abandoned_order_that_never_expired_is_a_violation() {
        let mut report = clean();
        report.expired = 14;
        let violations = report.check_invariants(100);
        assert_eq!(violations[0], "abandoned orders expired: 14 of 15");
    }

    #[test]
    fn a_server_error_in_the_second_wave_is_a_violation() {
        let mut report = clean();
        let wave = report.second_wave.as_mut().unwrap();
        wave.outcomes.insert("UNAVAILABLE".into(), 2);
        wave.failure_codes.insert("UNAVAILABLE".into());
        assert_eq!(
            report.check_invariants(100),
            vec!["2 second-wave buyers failed with UNAVAILABLE"]
        );
    }

    #[test]
    fn a_token_handed_out_twice_is_a_violation() {
        let mut report = clean();
        report.all_tokens_distinct = false;
        assert_eq!(
            report.check_invariants(100),
            vec!["an order token was handed out twice"]
        );
    }

    #[test]
    fn the_summary_says_what_happened_after_the_click() {
        let text = clean().to_string();
        assert!(text.contains("price 19.99"), "{text}");
        assert!(
            text.contains("paid 70 · cancelled 15 · expired 15"),
            "{text}"
        );
        assert!(text.contains("duplicated 7, 7 answered the same"), "{text}");
        assert!(text.contains("late 3, 3 refunds due"), "{text}");
        assert!(
            text.contains("20 watched, 20 saw their final status · worst delay 40 ms"),
            "{text}"
        );
        assert!(
            text.contains("30 of 30 returned units sold again"),
            "{text}"
        );
    }
}
