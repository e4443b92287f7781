//! One reconcile run: per product, Redis flows ⇄ MySQL orders ⇄ stock_flow ⇄ totals, and
//! how orders ended in each store.
//!
//! After the purchase MySQL decides how an order ends and Redis follows
//! (`order_lifecycle`): reconcile expires the confirmed orders whose deadline message was
//! lost, gives back in Redis the units of orders MySQL closed, and reports what only a
//! person can settle (Redis gave back units MySQL holds sold; MySQL gave back a paid
//! order's stock). Refunds due are listed, not judged: they are money, not stock.
//!
//! Memory stays bounded: flows are read a page at a time (HSCAN) and checked against MySQL
//! with one batched IN query per page; orders are paged by id and checked against Redis
//! with one pipelined HEXISTS per page. Every repair goes through the same atomic steps as
//! the live path (confirm.lua, release.lua, a conditional stock update), so it can never
//! race a purchase into selling a unit twice, and running it again repairs nothing twice.
//!
//! Traces: a run is a trace (`reconcile_run`, one `reconcile_product` span per product);
//! every repair starts a trace of its own (`reconcile_repair`) that names the order token,
//! and a re-published order carries that trace to the consumer, whose write joins it.
//! Metrics: runs by status, discrepancies by kind, repairs by action and outcome, the last
//! run's unresolved count, per-product drift and stock, last run time and duration.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use domain::reconcile::{DiscrepancyKind, FlowFact, TokenFacts, classify, drift};
use domain::{Closing, FlowRecord, FlowState, OrderPlaced, OrderToken, ProductId};
use futures::future::join_all;
use order_lifecycle::{Ending, closing_of};
use order_queue::OrderPublisher;
use order_store::{Db, DiscrepancyRecord, OrderFacts, OrderPageRow, RunStatus, UnwritableOrderRow};
use platform::telemetry::{ORDER_TOKEN_ATTRIBUTE, annotate};
use stock_cache::{ReleaseOutcome, ReturnOutcome, StockCache};
use tracing::Instrument;
use tracing::field::Empty;

use crate::lease::{Lease, renewed_while};
use crate::report::{Action, Finding, LISTED_REFUNDS, Outcome, ProductReport, RefundDue, Report};
use crate::room::MysqlRoom;

/// What to do with a missing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Confirm the flow and send the order again (the consumer is idempotent).
    Republish,
    /// Give the unit back to the sale (if the flow is not committed).
    Restore,
    /// Only report it.
    Report,
}

impl FromStr for Policy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "republish" => Ok(Self::Republish),
            "restore" => Ok(Self::Restore),
            "report" => Ok(Self::Report),
            other => Err(format!(
                "unknown policy `{other}` (republish, restore or report)"
            )),
        }
    }
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Republish => "republish",
            Self::Restore => "restore",
            Self::Report => "report",
        }
    }
}

pub struct Auditor {
    pub db: Db,
    pub cache: StockCache,
    pub publisher: Arc<OrderPublisher>,
    pub grace: Duration,
    /// How long past its `pay_by` a confirmed order waits for its deadline message before
    /// reconcile expires it (`orders.expiry_grace_secs`).
    pub expiry_grace: Duration,
    pub scan_batch: usize,
    /// Who holds the lease: host and pid, for the operator who finds it taken.
    pub holder: String,
    pub lease_ttl: Duration,
    /// Classify and report only: every repair answers what it would do.
    pub dry_run: bool,
}

/// A repair an operator asks for by hand, for one order token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManualAction {
    /// confirm.lua, then send the order again.
    Republish,
    /// release.lua: the unit back on sale (refused once the flow is committed).
    Release,
    /// RECONCILE_DEDUCT for an order whose stock was never deducted.
    Deduct,
}

impl FromStr for ManualAction {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "republish" => Ok(Self::Republish),
            "release" => Ok(Self::Release),
            "deduct" => Ok(Self::Deduct),
            other => Err(format!(
                "unknown action `{other}` (republish, release or deduct)"
            )),
        }
    }
}

/// What pass 1 (every flow against MySQL) leaves for the steps after it.
#[derive(Default)]
struct FlowScan {
    /// Orders pass 1 matched to a flow: pass 2 looks for orphans only if some order is not.
    matched_orders: u64,
    /// Flows past the grace window without an order, each once, settled after the scan,
    /// once MySQL's room for them is known.
    missing: Vec<(OrderToken, FlowRecord)>,
    /// Units of the flows still within the grace window without an order: on their way to
    /// MySQL, they will take its stock before anything re-published now.
    in_flight_units: i64,
    /// Flows of orders MySQL cancelled or expired, each once: their units go back in Redis
    /// after the scan, as the missing orders are settled.
    unreturned: Vec<(OrderToken, FlowRecord, Closing)>,
}

impl Auditor {
    /// One run under the lease, renewed while the run lasts. Err when the run could not
    /// happen at all (lease taken, a store down) or lost its lease; discrepancies are in the
    /// report, not errors.
    pub async fn run(&self, policy: Policy, only: Option<ProductId>) -> anyhow::Result<Report> {
        let Some(lease) = Lease::take(&self.db, &self.holder, self.lease_ttl).await? else {
            anyhow::bail!("another reconcile run holds the lease; try again later");
        };
        let span = tracing::info_span!(
            parent: None,
            "reconcile_run",
            policy = policy.as_str(),
            dry_run = self.dry_run,
            run_id = Empty,
            status = Empty,
        );
        // Boxed: a run's future is large, and a daemon's task (or a test's thread) holds
        // it on its stack otherwise.
        let run = Box::pin(self.run_leased(policy, only, &lease)).instrument(span.clone());
        let result = renewed_while(&lease, run).await;
        let status = match &result {
            Ok(report) => report.status.clone(),
            Err(_) => RunStatus::Failed.as_str().to_owned(),
        };
        span.record("status", status.as_str());
        metrics::counter!("seckill_reconcile_runs_total", "status" => status).increment(1);
        lease.release().await;
        result
    }

    async fn run_leased(
        &self,
        policy: Policy,
        only: Option<ProductId>,
        lease: &Lease<'_>,
    ) -> anyhow::Result<Report> {
        let started = std::time::Instant::now();
        let started_at = now_rfc3339();
        let label = if self.dry_run {
            "dry-run"
        } else {
            policy.as_str()
        };
        let run_id = self.db.start_run(label, only).await?;
        tracing::Span::current().record("run_id", run_id);
        let products = match only {
            Some(product) => vec![product],
            None => self.db.product_ids().await?,
        };
        let mut report = Report::new(run_id, label, started_at);
        let mut outcome = Ok(());
        for product in products {
            let mut findings = Vec::new();
            let audited = Box::pin(self.audit_product(product, policy, lease, &mut findings))
                .instrument(tracing::info_span!("reconcile_product", product_id = %product))
                .await;
            match audited {
                Ok(Some(product_report)) => report.products.push(product_report),
                Ok(None) => {}
                Err(error) => {
                    outcome = Err(error);
                }
            }
            self.record(run_id, &findings).await;
            report.add(findings);
            if outcome.is_err() {
                break;
            }
        }

        let status = match (&outcome, report.unresolved(), report.discrepancy_count) {
            (Err(_), _, _) => RunStatus::Failed,
            (Ok(()), 0, 0) => RunStatus::Clean,
            (Ok(()), 0, _) => RunStatus::Repaired,
            (Ok(()), _, _) => RunStatus::Unresolved,
        };
        report.status = status.as_str().to_owned();
        report.finished_at = now_rfc3339();
        let json = serde_json::to_string(&report).expect("a report always serialises");
        self.db.finish_run(run_id, status, &json).await?;
        metrics::gauge!("seckill_reconcile_last_run_timestamp_seconds")
            .set(Utc::now().timestamp() as f64);
        metrics::histogram!("seckill_reconcile_run_seconds")
            .record(started.elapsed().as_secs_f64());
        if outcome.is_ok() {
            metrics::gauge!("seckill_reconcile_unresolved").set(report.unresolved() as f64);
        }
        outcome.map(|()| report)
    }

    async fn record(&self, run_id: u64, findings: &[Finding]) {
        let records: Vec<_> = findings
            .iter()
            .map(|f| DiscrepancyRecord {
                product_id: ProductId(f.product_id),
                kind: f.kind,
                order_token: f.order_token.as_deref(),
                action: f.action.as_str(),
                outcome: f.outcome.as_str(),
                detail: &f.detail,
            })
            .collect();
        for finding in findings {
            metrics::counter!("seckill_reconcile_discrepancies_total", "kind" => finding.kind.as_str())
                .increment(1);
            metrics::counter!("seckill_reconcile_repairs_total", "action" => finding.action.as_str(), "outcome" => finding.outcome.as_str())
                .increment(1);
        }
        if let Err(error) = self.db.record_discrepancies(run_id, &records).await {
            tracing::error!(run_id, error = ?error, "Cannot record the run's discrepancies; the report still has them.");
        }
    }

    /// One product, in steps: the overdue orders expired, every flow against MySQL, the
    /// missing orders settled and the closed orders' units returned, every order against
    /// Redis, the paid orders MySQL gave back, then the totals of each store and how the
    /// orders ended. The lease is checked between steps (and pages): a run that lost it
    /// stops there.
    async fn audit_product(
        &self,
        product: ProductId,
        policy: Policy,
        lease: &Lease<'_>,
        findings: &mut Vec<Finding>,
    ) -> anyhow::Result<Option<ProductReport>> {
        let Some(row) = self.db.product(product).await? else {
            return Ok(None);
        };
        let meta = self.cache.meta(product).await?;
        let mut report = ProductReport {
            product_id: product.get(),
            initial_stock: row.initial_stock,
            ..ProductReport::default()
        };
        // First, so that the scans and the totals below see them ended and returned.
        self.expire_overdue(product, lease, findings).await?;
        // Redis stock before the scan: if it moves during the scan (buyers, releases other
        // than ours), the scanned flows and the stock are from different moments.
        let redis_stock_before = self.cache.stock(product).await?;
        let mut scan = self
            .scan_flows(product, lease, &mut report, findings)
            .await?;
        lease.check()?;
        let matched_orders = scan.matched_orders;
        let unreturned = std::mem::take(&mut scan.unreturned);
        let restored_units = self
            .settle_missing(product, policy, scan, lease, &mut report, findings)
            .await?;
        let returned_units = self
            .return_closed(unreturned, lease, &mut report, findings)
            .await?;
        self.scan_orders(product, matched_orders, lease, &mut report, findings)
            .await?;
        self.find_paid_released(product, lease, findings).await?;
        lease.check()?;

        // Totals, read after the repairs above.
        self.judge_redis(
            product,
            meta.map(|m| m.initial_stock),
            redis_stock_before.map(|s| s + restored_units + returned_units),
            &mut report,
            findings,
        )
        .await?;
        self.judge_mysql(product, row.initial_stock, &mut report, findings)
            .await?;
        self.count_endings(product, &mut report).await?;
        report.found = count_by_kind(findings);
        Ok(Some(report))
    }

    /// Pass 1: every flow against MySQL. Orders whose stock was not deducted are deducted
    /// here; flows missing their order are collected for [`Auditor::settle_missing`]. HSCAN
    /// may return a field twice while Redis rehashes: the worst is a count off by a little,
    /// and a missing order is collected once. The next page is scanned while MySQL answers
    /// for this one: the audit is bound by round trips, not by CPU.
    async fn scan_flows(
        &self,
        product: ProductId,
        lease: &Lease<'_>,
        report: &mut ProductReport,
        findings: &mut Vec<Finding>,
    ) -> anyhow::Result<FlowScan> {
        let grace_ms = self.grace_ms();
        let now_ms = Utc::now().timestamp_millis();
        let mut scan = FlowScan::default();
        let mut collected = HashSet::new();
        let mut page = self.cache.scan_flows(product, 0, self.scan_batch).await?;
        loop {
            lease.check()?;
            let tokens: Vec<OrderToken> = page.flows.iter().map(|(t, _)| t.clone()).collect();
            let next_cursor = page.next_cursor;
            let (orders, next_page) =
                tokio::join!(self.db.orders_for_tokens(product, &tokens), async {
                    match next_cursor {
                        0 => None,
                        cursor => Some(
                            self.cache
                                .scan_flows(product, cursor, self.scan_batch)
                                .await,
                        ),
                    }
                });
            let orders = orders?;
            for (token, flow) in &page.flows {
                report.flows += 1;
                report.flow_units += i64::from(flow.quantity);
                let order = orders.get(token);
                scan.matched_orders += u64::from(order.is_some());
                match judge_flow(flow, order, now_ms, grace_ms) {
                    Some(DiscrepancyKind::MissingOrder) if collected.insert(token.clone()) => {
                        scan.missing.push((token.clone(), flow.clone()));
                    }
                    Some(DiscrepancyKind::UnitNotReturned) if collected.insert(token.clone()) => {
                        if let Some(closing) = order.and_then(|o| closing_of(o.status)) {
                            scan.unreturned.push((token.clone(), flow.clone(), closing));
                        }
                    }
                    // Seen before on an earlier page of the scan.
                    Some(DiscrepancyKind::MissingOrder | DiscrepancyKind::UnitNotReturned) => {}
                    Some(DiscrepancyKind::StockNotDeducted) => {
                        findings.push(
                            traced_repair(
                                token,
                                DiscrepancyKind::StockNotDeducted,
                                self.repair_deduct(token),
                            )
                            .await,
                        );
                    }
                    Some(other) => {
                        findings.push(reported(product, other, Some(&token.to_string()), ""));
                    }
                    None if order.is_none() => {
                        report.in_flight += 1;
                        scan.in_flight_units += i64::from(flow.quantity);
                    }
                    None => {}
                }
            }
            for token in page.unreadable {
                findings.push(reported(
                    product,
                    DiscrepancyKind::RedisDrift,
                    Some(&token),
                    "flow record cannot be read",
                ));
            }
            match next_page {
                Some(next) => page = next?,
                None => break,
            }
        }
        Ok(scan)
    }

    /// The missing orders of pass 1, by policy, the earliest reserved first (they were sold
    /// first). A re-publish needs room in MySQL ([`MysqlRoom`]): its stock as it is now,
    /// less the orders on their way. Returns the units `restore` put back on sale.
    async fn settle_missing(
        &self,
        product: ProductId,
        policy: Policy,
        mut scan: FlowScan,
        lease: &Lease<'_>,
        report: &mut ProductReport,
        findings: &mut Vec<Finding>,
    ) -> anyhow::Result<i64> {
        if scan.missing.is_empty() {
            return Ok(0);
        }
        scan.missing.sort_by_key(|(_, flow)| flow.reserved_at_ms);
        let mut room = self.mysql_room(product, scan.in_flight_units).await?;
        let tokens: Vec<OrderToken> = scan.missing.iter().map(|(t, _)| t.clone()).collect();
        let refused = self
            .db
            .unwritable_orders_for_tokens(product, &tokens)
            .await?;
        let mut restored_units = 0;
        for (token, flow) in &scan.missing {
            lease.check()?;
            let repair = self.repair_missing(token, flow, policy, &mut room, refused.get(token));
            let finding = traced_repair(token, DiscrepancyKind::MissingOrder, repair).await;
            if (finding.action, finding.outcome) == (Action::Restore, Outcome::Repaired) {
                // The flow is gone and its units are back in stock: the totals are read
                // after the repairs, so stop counting it.
                report.flows -= 1;
                report.flow_units -= i64::from(flow.quantity);
                restored_units += i64::from(flow.quantity);
            }
            findings.push(finding);
        }
        Ok(restored_units)
    }

    /// Confirmed orders past their `pay_by` by more than the expiry grace, expired the way
    /// their deadline message would have (`order_lifecycle::close`, which also counts them
    /// in `seckill_orders_ended_total`): their units back in MySQL, then in Redis. A page
    /// at a time, the most overdue first, until a page brings no order not seen before:
    /// an expiry that failed (or a dry run, which expires nothing) leaves its orders on
    /// the first page, and they are not tried twice in a run.
    async fn expire_overdue(
        &self,
        product: ProductId,
        lease: &Lease<'_>,
        findings: &mut Vec<Finding>,
    ) -> anyhow::Result<()> {
        let limit = i64::try_from(self.scan_batch).unwrap_or(i64::MAX);
        let mut seen = HashSet::new();
        loop {
            lease.check()?;
            let page = self
                .db
                .overdue_orders(product, self.expiry_grace, limit)
                .await?;
            let last_page = i64::try_from(page.len()).unwrap_or(i64::MAX) < limit;
            let fresh: Vec<OrderToken> = page
                .into_iter()
                .filter(|t| seen.insert(t.clone()))
                .collect();
            if fresh.is_empty() {
                return Ok(());
            }
            for token in &fresh {
                let expiry = self.expire(token);
                findings
                    .push(traced_repair(token, DiscrepancyKind::OverdueUnexpired, expiry).await);
            }
            if last_page {
                return Ok(());
            }
        }
    }

    async fn expire(&self, token: &OrderToken) -> Finding {
        let finding = |outcome, detail: String| Finding {
            product_id: token.product_id().get(),
            kind: DiscrepancyKind::OverdueUnexpired,
            order_token: Some(token.to_string()),
            action: Action::Expire,
            outcome,
            detail,
        };
        if self.dry_run {
            return finding(
                Outcome::WouldRepair,
                "would expire it and give its units back".into(),
            );
        }
        match order_lifecycle::close(&self.db, &self.cache, token, Closing::Expired).await {
            Ok(Ending::Now(_)) => {
                tracing::info!(order = %token.short(), "Overdue order expired; its deadline never came.");
                finding(
                    Outcome::Repaired,
                    "expired past its pay_by: units back in MySQL, then in Redis".into(),
                )
            }
            Ok(Ending::Before(row)) => finding(
                Outcome::AlreadySettled,
                format!("it ended meanwhile, as {}", row.status),
            ),
            Ok(Ending::NotDue(_)) => finding(
                Outcome::AlreadySettled,
                "not past its pay_by by MySQL's clock".into(),
            ),
            Ok(Ending::Unknown) => finding(Outcome::AlreadySettled, "the order is gone".into()),
            Err(error) => finding(Outcome::Unresolved, format!("expiry failed: {error}")),
        }
    }

    /// The units of pass 1's flows whose orders MySQL closed, given back in Redis, as the
    /// live path would have after its MySQL step. Returns the units given back.
    async fn return_closed(
        &self,
        unreturned: Vec<(OrderToken, FlowRecord, Closing)>,
        lease: &Lease<'_>,
        report: &mut ProductReport,
        findings: &mut Vec<Finding>,
    ) -> anyhow::Result<i64> {
        let mut returned_units = 0;
        for (token, flow, closing) in &unreturned {
            lease.check()?;
            let repair = self.return_units(token, *closing);
            let finding = traced_repair(token, DiscrepancyKind::UnitNotReturned, repair).await;
            if (finding.action, finding.outcome) == (Action::Return, Outcome::Repaired) {
                // As for a restore: the flow is gone and its units are back in stock.
                report.flows -= 1;
                report.flow_units -= i64::from(flow.quantity);
                returned_units += i64::from(flow.quantity);
            }
            findings.push(finding);
        }
        Ok(returned_units)
    }

    /// `return_units.lua` for an order MySQL closed as `closing`: it returns the units at
    /// most once, so a live path returning them at the same moment cannot double them.
    async fn return_units(&self, token: &OrderToken, closing: Closing) -> Finding {
        let finding = |outcome, detail: String| Finding {
            product_id: token.product_id().get(),
            kind: DiscrepancyKind::UnitNotReturned,
            order_token: Some(token.to_string()),
            action: Action::Return,
            outcome,
            detail,
        };
        if self.dry_run {
            return finding(
                Outcome::WouldRepair,
                format!("{closing} in MySQL: would give its units back in Redis"),
            );
        }
        match self.cache.return_units(token, closing).await {
            Ok(ReturnOutcome::Returned) => {
                metrics::counter!("seckill_units_returned_total", "why" => closing.as_str())
                    .increment(1);
                finding(
                    Outcome::Repaired,
                    format!("{closing} in MySQL: units back on sale in Redis"),
                )
            }
            Ok(ReturnOutcome::AlreadyReturned) => finding(
                Outcome::AlreadySettled,
                "returned meanwhile by the live path".into(),
            ),
            Ok(ReturnOutcome::NotHeld) => finding(
                Outcome::AlreadySettled,
                "the flow was gone, given back otherwise".into(),
            ),
            Ok(ReturnOutcome::NotLoaded) => finding(
                Outcome::Unresolved,
                "Redis lost the product: a reload restores it from MySQL".into(),
            ),
            Err(error) => finding(Outcome::Unresolved, format!("return failed: {error}")),
        }
    }

    fn grace_ms(&self) -> i64 {
        i64::try_from(self.grace.as_millis()).unwrap_or(i64::MAX)
    }

    /// MySQL's room for re-publishing `product`'s orders now; no stock row is no room.
    async fn mysql_room(
        &self,
        product: ProductId,
        in_flight_units: i64,
    ) -> anyhow::Result<MysqlRoom> {
        let stock = self.db.stock(product).await?.unwrap_or(0);
        Ok(MysqlRoom::new(stock, in_flight_units))
    }

    /// Pass 2: every order against Redis, for the orders that have no flow. Skipped when
    /// pass 1 matched every order to a flow: then there is no orphan to find. An order
    /// without a flow is reported, never deducted (see [`classify`]): an orphan if Redis
    /// never held it, `returned_while_open` if Redis gave its units back while MySQL holds
    /// it open or paid. Closed orders have no flow by design and are skipped.
    async fn scan_orders(
        &self,
        product: ProductId,
        matched_orders: u64,
        lease: &Lease<'_>,
        report: &mut ProductReport,
        findings: &mut Vec<Finding>,
    ) -> anyhow::Result<()> {
        let order_count = u64::try_from(self.db.order_count(product).await?).unwrap_or(0);
        if order_count == matched_orders {
            report.orders = order_count;
            return Ok(());
        }
        let limit = u32::try_from(self.scan_batch).unwrap_or(u32::MAX);
        let mut after_id = 0;
        loop {
            lease.check()?;
            let page = self.db.orders_page(product, after_id, limit).await?;
            let Some(last) = page.last() else {
                return Ok(());
            };
            after_id = last.id;
            let tokens: Vec<String> = page.iter().map(|o| o.order_token.clone()).collect();
            let has_flow = self.cache.flows_exist(product, &tokens).await?;
            let mut flowless = Vec::new();
            for (order, has_flow) in page.iter().zip(has_flow) {
                report.orders += 1;
                if has_flow {
                    report.ordered_units += i64::from(order.quantity);
                    continue; // judged in pass 1
                }
                // A cancelled or expired order gave its units back: its flow left Redis
                // on purpose, and its units count in the stock, not as ordered.
                if order.status.returned_units() {
                    continue;
                }
                report.ordered_units += i64::from(order.quantity);
                flowless.push(order);
            }
            let returned = self.returned_in_redis(&flowless).await?;
            let now_ms = Utc::now().timestamp_millis();
            for (order, returned_in_redis) in flowless.into_iter().zip(returned) {
                let facts = TokenFacts {
                    flow: None,
                    order: Some(order.status),
                    has_stock_flow: order.has_stock_flow,
                    returned_in_redis,
                };
                if let Some(kind) = classify(facts, now_ms, self.grace_ms()) {
                    let detail = flowless_detail(order, returned_in_redis);
                    findings.push(reported(product, kind, Some(&order.order_token), &detail));
                }
            }
        }
    }

    /// Why each of these orders has no flow, as Redis's tombstones tell it: the closing
    /// whose return tombstoned it, if any. One read per order, a page's all at once on the
    /// shared connection; only orders without a flow are asked, which a healthy sale has
    /// none of.
    async fn returned_in_redis(
        &self,
        orders: &[&OrderPageRow],
    ) -> anyhow::Result<Vec<Option<Closing>>> {
        let reads = orders.iter().map(|order| async move {
            // A token MySQL holds that does not parse names nothing Redis could hold.
            let Ok(token) = order.order_token.parse::<OrderToken>() else {
                return Ok(None);
            };
            let view = self.cache.order_view(&token).await?;
            Ok::<_, stock_cache::CacheError>(view.tombstone.and_then(|tomb| tomb.closing()))
        });
        let closings: Result<Vec<_>, _> = join_all(reads).await.into_iter().collect();
        Ok(closings?)
    }

    /// Paid orders whose stock a RELEASE row gave back in MySQL, a page at a time: the
    /// buyer paid for units the stock sells again. Reported, never repaired: undoing the
    /// release could take a unit already sold to someone else, and refunding the buyer is
    /// a person's call.
    async fn find_paid_released(
        &self,
        product: ProductId,
        lease: &Lease<'_>,
        findings: &mut Vec<Finding>,
    ) -> anyhow::Result<()> {
        let limit = u32::try_from(self.scan_batch).unwrap_or(u32::MAX);
        let mut after_id = 0;
        loop {
            lease.check()?;
            let page = self
                .db
                .paid_orders_released(product, after_id, limit)
                .await?;
            let Some(last) = page.last() else {
                return Ok(());
            };
            after_id = last.id;
            for order in &page {
                tracing::error!(order = %order.order_token, units = order.released, "A paid order's stock was given back in MySQL.");
                let detail = format!(
                    "paid, yet a RELEASE gave its {} unit(s) back to the MySQL stock: they \
                     can be sold twice",
                    order.released
                );
                findings.push(reported(
                    product,
                    DiscrepancyKind::PaidButReleased,
                    Some(&order.order_token),
                    &detail,
                ));
            }
        }
    }

    /// How the product's orders ended, and the refunds it owes (listed for a person, not
    /// judged: a payment after an order ended is money to give back, not a fault of the
    /// stores). Sets `seckill_refunds_due{product_id}`.
    async fn count_endings(
        &self,
        product: ProductId,
        report: &mut ProductReport,
    ) -> anyhow::Result<()> {
        let counts = self.db.lifecycle_counts(product).await?;
        report.paid_orders = counts.paid_orders;
        report.paid_units = counts.paid_units;
        report.returned_units = counts.returned_units;
        report.refunds_due = counts.refunds_due;
        metrics::gauge!("seckill_refunds_due", "product_id" => product.get().to_string())
            .set(counts.refunds_due as f64);
        if counts.refunds_due > 0 {
            let refunds = self.db.refunds_due(product).await?;
            report.refunds = refunds
                .into_iter()
                .take(LISTED_REFUNDS)
                .map(|r| RefundDue {
                    payment_id: r.payment_id,
                    order_token: r.order_token.to_string(),
                    amount_cents: r.amount_cents,
                    paid_at: r.paid_at.to_rfc3339_opts(SecondsFormat::Millis, true),
                })
                .collect();
        }
        Ok(())
    }

    /// Redis stock + units in flows = initial, when the stock did not move during the scan
    /// (`expected_stock`: the stock before the scan, plus what restore and the returns of
    /// closed orders gave back). A returned order's flow left the hash: only open flows
    /// count.
    async fn judge_redis(
        &self,
        product: ProductId,
        initial: Option<i64>,
        expected_stock: Option<i64>,
        report: &mut ProductReport,
        findings: &mut Vec<Finding>,
    ) -> anyhow::Result<()> {
        report.redis_stock = self.cache.stock(product).await?;
        if let Some(stock) = report.redis_stock {
            platform::ops::record_stock(product.get(), "redis", stock);
        }
        let (Some(initial), Some(stock)) = (initial, report.redis_stock) else {
            return Ok(());
        };
        if expected_stock != Some(stock) {
            report.redis_live = true;
            tracing::info!(product_id = %product, "Redis stock moved during the scan; its drift check waits for a quiet run.");
            return Ok(());
        }
        let gap = drift(initial, stock, report.flow_units);
        drift_gauge(product, "redis", gap);
        if let Some(gap) = gap {
            findings.push(reported(
                product,
                DiscrepancyKind::RedisDrift,
                None,
                &format!(
                    "redis stock {stock} + flow units {} - initial {initial} = {gap}",
                    report.flow_units
                ),
            ));
        }
        Ok(())
    }

    /// MySQL stock + units ordered = initial, both read in one statement. Cancelled and
    /// expired orders are not ordered units: their RELEASE put them back in the stock.
    async fn judge_mysql(
        &self,
        product: ProductId,
        initial: i64,
        report: &mut ProductReport,
        findings: &mut Vec<Finding>,
    ) -> anyhow::Result<()> {
        let Some((stock, ordered)) = self.db.stock_and_ordered(product).await? else {
            return Ok(());
        };
        report.mysql_stock = Some(stock);
        report.ordered_units = ordered;
        platform::ops::record_stock(product.get(), "mysql", stock);
        let gap = drift(initial, stock, ordered);
        drift_gauge(product, "mysql", gap);
        if let Some(gap) = gap {
            findings.push(reported(
                product,
                DiscrepancyKind::MysqlDrift,
                None,
                &format!(
                    "mysql stock {stock} + ordered units {ordered} - initial {initial} = {gap}"
                ),
            ));
        }
        Ok(())
    }

    /// One repair an operator asked for, under the lease and recorded as a run of its own.
    pub async fn repair_token(
        &self,
        token: &OrderToken,
        action: ManualAction,
    ) -> anyhow::Result<Finding> {
        let Some(lease) = Lease::take(&self.db, &self.holder, self.lease_ttl).await? else {
            anyhow::bail!("a reconcile run holds the lease; try again when it has finished");
        };
        let result = renewed_while(&lease, self.repair_token_leased(token, action)).await;
        lease.release().await;
        result
    }

    async fn repair_token_leased(
        &self,
        token: &OrderToken,
        action: ManualAction,
    ) -> anyhow::Result<Finding> {
        let product = token.product_id();
        let flow = self.cache.order_view(token).await?.flow;
        let finding = match (action, flow) {
            (ManualAction::Deduct, _) => {
                if self.db.order(token).await?.is_none() {
                    anyhow::bail!("there is no order {token} in MySQL: nothing to deduct for");
                }
                traced_repair(
                    token,
                    DiscrepancyKind::StockNotDeducted,
                    self.repair_deduct(token),
                )
                .await
            }
            (ManualAction::Republish, Some(flow)) => {
                // Nothing else is being re-published: the room is MySQL's stock.
                let mut room = self.mysql_room(product, 0).await?;
                let refused = self.db.unwritable_order(token).await?;
                traced_repair(
                    token,
                    DiscrepancyKind::MissingOrder,
                    self.republish(token, &flow, &mut room, refused.as_ref()),
                )
                .await
            }
            (ManualAction::Release, Some(flow)) => {
                traced_repair(
                    token,
                    DiscrepancyKind::MissingOrder,
                    self.restore(token, &flow),
                )
                .await
            }
            (_, None) => anyhow::bail!("there is no flow {token} in Redis: nothing to {action:?}"),
        };
        let label = if self.dry_run { "dry-run" } else { "manual" };
        let run_id = self.db.start_run(label, Some(product)).await?;
        self.record(run_id, std::slice::from_ref(&finding)).await;
        let status = match finding.outcome {
            Outcome::Repaired | Outcome::AlreadySettled => RunStatus::Repaired,
            Outcome::Unresolved | Outcome::WouldRepair => RunStatus::Unresolved,
        };
        let mut report = Report::new(run_id, label, now_rfc3339());
        report.finished_at = now_rfc3339();
        report.status = status.as_str().to_owned();
        report.add([finding.clone()]);
        let json = serde_json::to_string(&report).expect("a report always serialises");
        self.db.finish_run(run_id, status, &json).await?;
        Ok(finding)
    }

    async fn restore(&self, token: &OrderToken, flow: &FlowRecord) -> Finding {
        let finding = |outcome, detail: String| Finding {
            product_id: token.product_id().get(),
            kind: DiscrepancyKind::MissingOrder,
            order_token: Some(token.to_string()),
            action: Action::Restore,
            outcome,
            detail,
        };
        if self.dry_run {
            return match flow.state {
                FlowState::Reserved => finding(
                    Outcome::WouldRepair,
                    "would release the unit back on sale".into(),
                ),
                FlowState::Committed => finding(
                    Outcome::Unresolved,
                    "committed: release would be refused".into(),
                ),
            };
        }
        match self.cache.release(token, "reconcile_restore").await {
            Ok(ReleaseOutcome::Released) => finding(Outcome::Repaired, "unit back on sale".into()),
            Ok(ReleaseOutcome::NothingReserved) => {
                finding(Outcome::AlreadySettled, "the flow was gone".into())
            }
            Ok(ReleaseOutcome::AlreadyCommitted) => finding(
                Outcome::Unresolved,
                "the flow is committed: its order must arrive, so the unit stays sold".into(),
            ),
            Err(error) => finding(Outcome::Unresolved, format!("release failed: {error}")),
        }
    }

    async fn repair_missing(
        &self,
        token: &OrderToken,
        flow: &FlowRecord,
        policy: Policy,
        room: &mut MysqlRoom,
        refused: Option<&UnwritableOrderRow>,
    ) -> Finding {
        let finding = |action, outcome, detail: String| Finding {
            product_id: token.product_id().get(),
            kind: DiscrepancyKind::MissingOrder,
            order_token: Some(token.to_string()),
            action,
            outcome,
            detail,
        };
        match policy {
            Policy::Report => finding(
                Action::Report,
                Outcome::Unresolved,
                "left for a person by policy".into(),
            ),
            Policy::Republish => self.republish(token, flow, room, refused).await,
            Policy::Restore => {
                let restored = self.restore(token, flow).await;
                // A committed message must become an order: restoring would sell twice.
                if flow.state == FlowState::Committed && !self.dry_run {
                    self.republish(token, flow, room, refused).await
                } else {
                    restored
                }
            }
        }
    }

    /// Confirms the flow and sends its order again — only when MySQL has `room` for it: an
    /// order MySQL cannot take would be refused by the consumer, so its re-publish repairs
    /// nothing and is reported unresolved instead, with why (`refused`: the consumer's
    /// record of refusing it before), and the flow is left as it is.
    async fn republish(
        &self,
        token: &OrderToken,
        flow: &FlowRecord,
        room: &mut MysqlRoom,
        refused: Option<&UnwritableOrderRow>,
    ) -> Finding {
        let finding = |outcome, detail: String| Finding {
            product_id: token.product_id().get(),
            kind: DiscrepancyKind::MissingOrder,
            order_token: Some(token.to_string()),
            action: Action::Republish,
            outcome,
            detail,
        };
        if let Err(why) = room.take(flow.quantity, refused) {
            tracing::error!(order = %token.short(), why, "A missing order MySQL cannot take; reported unresolved.");
            return finding(Outcome::Unresolved, why);
        }
        if self.dry_run {
            return finding(Outcome::WouldRepair, "would confirm and re-publish".into());
        }
        match self.cache.confirm(token).await {
            Ok(true) => {}
            Ok(false) => {
                return finding(
                    Outcome::AlreadySettled,
                    "the flow was released meanwhile".into(),
                );
            }
            Err(error) => return finding(Outcome::Unresolved, format!("confirm failed: {error}")),
        }
        let order = OrderPlaced::new(
            token.clone(),
            flow.user_id,
            flow.quantity,
            flow.reserved_at_ms,
        );
        // The consumer's write joins the repair's trace, under the send.
        let span = tracing::info_span!(
            "mq.publish",
            otel.kind = "producer",
            messaging.system = "rocketmq"
        );
        let traceparent = platform::telemetry::traceparent_of(&span);
        let published = self
            .publisher
            .publish(&order, traceparent.as_deref())
            .instrument(span)
            .await;
        match published {
            Ok(()) => {
                tracing::info!(order = %token.short(), "Missing order re-published.");
                finding(Outcome::Repaired, "confirmed and re-published".into())
            }
            Err(error) => finding(Outcome::Unresolved, format!("publish failed: {error}")),
        }
    }

    async fn repair_deduct(&self, token: &OrderToken) -> Finding {
        let planned = self.dry_run.then(|| {
            (
                Outcome::WouldRepair,
                "would deduct (RECONCILE_DEDUCT)".to_owned(),
            )
        });
        let (outcome, detail) = match planned {
            Some(plan) => plan,
            None => match self.db.deduct_for_order(token).await {
                Ok(true) => (
                    Outcome::Repaired,
                    "stock deducted (RECONCILE_DEDUCT)".to_owned(),
                ),
                Ok(false) => (
                    Outcome::AlreadySettled,
                    "a stock_flow exists already".to_owned(),
                ),
                Err(error) => (Outcome::Unresolved, format!("deduct failed: {error}")),
            },
        };
        Finding {
            product_id: token.product_id().get(),
            kind: DiscrepancyKind::StockNotDeducted,
            order_token: Some(token.to_string()),
            action: Action::Deduct,
            outcome,
            detail,
        }
    }
}

/// Runs one repair in a trace of its own, named for the order token (in full as an
/// attribute; log lines get the short form), and logs what it came to.
async fn traced_repair(
    token: &OrderToken,
    kind: DiscrepancyKind,
    repair: impl Future<Output = Finding>,
) -> Finding {
    let span = tracing::info_span!(
        parent: None,
        "reconcile_repair",
        kind = kind.as_str(),
        order = %token.short(),
        action = Empty,
        outcome = Empty,
    );
    annotate(&span, ORDER_TOKEN_ATTRIBUTE, token.to_string());
    let finding = Box::pin(repair).instrument(span.clone()).await;
    span.record("action", finding.action.as_str());
    span.record("outcome", finding.outcome.as_str());
    span.in_scope(|| {
        tracing::info!(
            kind = kind.as_str(),
            action = finding.action.as_str(),
            outcome = finding.outcome.as_str(),
            detail = %finding.detail,
            "Repair finished."
        );
    });
    finding
}

/// What pass 1 makes of one flow, given the order MySQL holds for its token, if any.
fn judge_flow(
    flow: &FlowRecord,
    order: Option<&OrderFacts>,
    now_ms: i64,
    grace_ms: i64,
) -> Option<DiscrepancyKind> {
    let facts = TokenFacts {
        flow: Some(FlowFact {
            reserved_at_ms: flow.reserved_at_ms,
            state: flow.state,
        }),
        order: order.map(|o| o.status),
        has_stock_flow: order.is_some_and(|o| o.has_stock_flow),
        // A flow is still there: Redis has not returned it.
        returned_in_redis: None,
    };
    classify(facts, now_ms, grace_ms)
}

/// The product report's `found`: how many discrepancies of each kind.
fn count_by_kind(findings: &[Finding]) -> BTreeMap<String, u64> {
    let mut found = BTreeMap::new();
    for finding in findings {
        *found.entry(finding.kind.as_str().to_owned()).or_default() += 1;
    }
    found
}

/// `seckill_reconcile_drift_units{product_id, store}`: the gap the last judgement found.
fn drift_gauge(product: ProductId, store: &'static str, gap: Option<i64>) {
    metrics::gauge!(
        "seckill_reconcile_drift_units",
        "product_id" => product.get().to_string(),
        "store" => store
    )
    .set(gap.unwrap_or(0) as f64);
}

/// What a person reads of an order without a flow.
fn flowless_detail(order: &OrderPageRow, returned_in_redis: Option<Closing>) -> String {
    match (returned_in_redis, order.has_stock_flow) {
        (Some(closing), _) => format!(
            "{} in MySQL, but Redis gave its units back as {closing}: they can be sold twice",
            order.status
        ),
        (None, true) => "no flow in Redis".to_owned(),
        (None, false) => "no flow in Redis and no stock_flow: nothing deducted for it, and \
                          nothing is (Redis never reserved its unit)"
            .to_owned(),
    }
}

fn reported(
    product: ProductId,
    kind: DiscrepancyKind,
    token: Option<&str>,
    detail: &str,
) -> Finding {
    Finding {
        product_id: product.get(),
        kind,
        order_token: token.map(str::to_owned),
        action: Action::Report,
        outcome: Outcome::Unresolved,
        detail: detail.to_owned(),
    }
}

fn now_rfc3339() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}
