//! One reconcile run: per product, Redis flows ⇄ MySQL orders ⇄ stock_flow ⇄ totals.
//!
//! Memory stays bounded: flows are read a page at a time (HSCAN) and checked against MySQL
//! with one batched IN query per page; orders are paged by id and checked against Redis
//! with one pipelined HEXISTS per page. Every repair goes through the same atomic steps as
//! the live path (confirm.lua, release.lua, a conditional stock update), so it can never
//! race a purchase into selling a unit twice, and running it again repairs nothing twice.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{SecondsFormat, Utc};
use domain::reconcile::{DiscrepancyKind, FlowFact, TokenFacts, classify, drift};
use domain::{FlowRecord, FlowState, OrderPlaced, OrderToken, ProductId};
use order_queue::OrderPublisher;
use order_store::{Db, DiscrepancyRecord, RunStatus};
use stock_cache::{ReleaseOutcome, StockCache};

use crate::report::{Action, Finding, Outcome, ProductReport, Report};

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

const LEASE: &str = "reconcile";

pub struct Auditor {
    pub db: Db,
    pub cache: StockCache,
    pub publisher: Arc<OrderPublisher>,
    pub grace: Duration,
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

impl Auditor {
    /// One run under the lease. Err when the run could not happen at all (lease taken,
    /// a store down); discrepancies are in the report, not errors.
    pub async fn run(&self, policy: Policy, only: Option<ProductId>) -> anyhow::Result<Report> {
        if !self
            .db
            .try_lease(LEASE, &self.holder, self.lease_ttl)
            .await
            .context("cannot take the reconcile lease")?
        {
            anyhow::bail!("another reconcile run holds the lease; try again later");
        }
        let result = self.run_leased(policy, only).await;
        if let Err(error) = self.db.release_lease(LEASE, &self.holder).await {
            tracing::warn!(error = ?error, "Cannot release the reconcile lease; it expires by itself.");
        }
        result
    }

    async fn run_leased(&self, policy: Policy, only: Option<ProductId>) -> anyhow::Result<Report> {
        let started = std::time::Instant::now();
        let started_at = now_rfc3339();
        let label = if self.dry_run {
            "dry-run"
        } else {
            policy.as_str()
        };
        let run_id = self.db.start_run(label, only).await?;
        let products = match only {
            Some(product) => vec![product],
            None => self.db.product_ids().await?,
        };
        let mut report = Report {
            run_id,
            policy: label.to_owned(),
            started_at,
            finished_at: String::new(),
            status: String::new(),
            products: Vec::new(),
            discrepancies: Vec::new(),
        };
        let mut outcome = Ok(());
        for product in products {
            let _span = tracing::info_span!("reconcile_product", product_id = %product).entered();
            let mut findings = Vec::new();
            match self.audit_product(product, policy, &mut findings).await {
                Ok(Some(product_report)) => report.products.push(product_report),
                Ok(None) => {}
                Err(error) => {
                    outcome = Err(error);
                }
            }
            self.record(run_id, &findings).await;
            report.discrepancies.extend(findings);
            if outcome.is_err() {
                break;
            }
        }

        let status = match (&outcome, report.unresolved(), report.discrepancies.len()) {
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

    async fn audit_product(
        &self,
        product: ProductId,
        policy: Policy,
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
        let grace_ms = i64::try_from(self.grace.as_millis()).unwrap_or(i64::MAX);
        let now_ms = Utc::now().timestamp_millis();
        // Redis stock before the scan: if it moves during the scan (buyers, releases other
        // than ours), the scanned flows and the stock are from different moments.
        let redis_stock_before = self.cache.stock(product).await?;
        let mut restored_units = 0;

        // Pass 1: every flow against MySQL. HSCAN may return a field twice while Redis
        // rehashes; repairs are idempotent, so the worst is a count off by a little.
        let mut cursor = 0;
        loop {
            let page = self
                .cache
                .scan_flows(product, cursor, self.scan_batch)
                .await?;
            let tokens: Vec<String> = page.flows.iter().map(|(t, _)| t.to_string()).collect();
            let orders = self.db.orders_for_tokens(product, &tokens).await?;
            for ((token, flow), text) in page.flows.iter().zip(&tokens) {
                report.flows += 1;
                report.flow_units += i64::from(flow.quantity);
                let order = orders.get(text);
                let facts = TokenFacts {
                    flow: Some(FlowFact {
                        reserved_at_ms: flow.reserved_at_ms,
                        state: flow.state,
                    }),
                    has_order: order.is_some(),
                    has_stock_flow: order.is_some_and(|o| o.has_stock_flow),
                };
                match classify(facts, now_ms, grace_ms) {
                    Some(DiscrepancyKind::MissingOrder) => {
                        let finding = self.repair_missing(token, flow, policy).await;
                        if (finding.action, finding.outcome) == (Action::Restore, Outcome::Repaired)
                        {
                            // The flow is gone and its units are back in stock: the totals
                            // below are read after the repair, so stop counting it.
                            report.flows -= 1;
                            report.flow_units -= i64::from(flow.quantity);
                            restored_units += i64::from(flow.quantity);
                        }
                        findings.push(finding);
                    }
                    Some(DiscrepancyKind::StockNotDeducted) => {
                        findings.push(self.repair_deduct(token).await);
                    }
                    Some(other) => findings.push(reported(product, other, Some(text), "")),
                    None if order.is_none() => report.in_flight += 1,
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
            cursor = page.next_cursor;
            if cursor == 0 {
                break;
            }
        }

        // Pass 2: every order against Redis, for the orders that have no flow.
        let mut after_id = 0;
        loop {
            let page = self
                .db
                .orders_page(
                    product,
                    after_id,
                    u32::try_from(self.scan_batch).unwrap_or(u32::MAX),
                )
                .await?;
            let Some(last) = page.last() else { break };
            after_id = last.id;
            let tokens: Vec<String> = page.iter().map(|o| o.order_token.clone()).collect();
            let has_flow = self.cache.flows_exist(product, &tokens).await?;
            for (order, has_flow) in page.iter().zip(has_flow) {
                report.orders += 1;
                report.ordered_units += i64::from(order.quantity);
                if has_flow {
                    continue; // judged in pass 1
                }
                let facts = TokenFacts {
                    flow: None,
                    has_order: true,
                    has_stock_flow: order.has_stock_flow,
                };
                match (classify(facts, now_ms, grace_ms), order.order_token.parse()) {
                    (Some(DiscrepancyKind::StockNotDeducted), Ok(token)) => {
                        findings.push(self.repair_deduct(&token).await);
                    }
                    (Some(kind), _) => {
                        findings.push(reported(product, kind, Some(&order.order_token), ""))
                    }
                    (None, _) => {}
                }
            }
        }

        // Totals, read after the repairs above.
        report.redis_stock = self.cache.stock(product).await?;
        let redis_settled = redis_stock_before.map(|s| s + restored_units) == report.redis_stock;
        match (&meta, report.redis_stock) {
            (Some(meta), Some(stock)) if redis_settled => {
                if let Some(gap) = drift(meta.initial_stock, stock, report.flow_units) {
                    findings.push(reported(
                        product,
                        DiscrepancyKind::RedisDrift,
                        None,
                        &format!(
                            "redis stock {stock} + flow units {} - initial {} = {gap}",
                            report.flow_units, meta.initial_stock
                        ),
                    ));
                }
            }
            (Some(_), Some(_)) => {
                report.redis_live = true;
                tracing::info!(product_id = %product, "Redis stock moved during the scan; its drift check waits for a quiet run.");
            }
            _ => {}
        }
        if let Some((stock, ordered)) = self.db.stock_and_ordered(product).await? {
            report.mysql_stock = Some(stock);
            if let Some(gap) = drift(row.initial_stock, stock, ordered) {
                findings.push(reported(
                    product,
                    DiscrepancyKind::MysqlDrift,
                    None,
                    &format!(
                        "mysql stock {stock} + ordered units {ordered} - initial {} = {gap}",
                        row.initial_stock
                    ),
                ));
            }
        }
        for finding in findings.iter() {
            *report
                .found
                .entry(finding.kind.as_str().to_owned())
                .or_default() += 1;
        }
        Ok(Some(report))
    }

    /// One repair an operator asked for, under the lease and recorded as a run of its own.
    pub async fn repair_token(
        &self,
        token: &OrderToken,
        action: ManualAction,
    ) -> anyhow::Result<Finding> {
        if !self
            .db
            .try_lease(LEASE, &self.holder, self.lease_ttl)
            .await
            .context("cannot take the reconcile lease")?
        {
            anyhow::bail!("a reconcile run holds the lease; try again when it has finished");
        }
        let result = self.repair_token_leased(token, action).await;
        if let Err(error) = self.db.release_lease(LEASE, &self.holder).await {
            tracing::warn!(error = ?error, "Cannot release the reconcile lease; it expires by itself.");
        }
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
                self.repair_deduct(token).await
            }
            (ManualAction::Republish, Some(flow)) => self.republish(token, &flow).await,
            (ManualAction::Release, Some(flow)) => self.restore(token, &flow).await,
            (_, None) => anyhow::bail!("there is no flow {token} in Redis: nothing to {action:?}"),
        };
        let label = if self.dry_run { "dry-run" } else { "manual" };
        let run_id = self.db.start_run(label, Some(product)).await?;
        self.record(run_id, std::slice::from_ref(&finding)).await;
        let status = match finding.outcome {
            Outcome::Repaired | Outcome::AlreadySettled => RunStatus::Repaired,
            Outcome::Unresolved | Outcome::WouldRepair => RunStatus::Unresolved,
        };
        let report = Report {
            run_id,
            policy: label.to_owned(),
            started_at: now_rfc3339(),
            finished_at: now_rfc3339(),
            status: status.as_str().to_owned(),
            products: Vec::new(),
            discrepancies: vec![finding.clone()],
        };
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
            Policy::Republish => self.republish(token, flow).await,
            Policy::Restore => {
                let restored = self.restore(token, flow).await;
                // A committed message must become an order: restoring would sell twice.
                if flow.state == FlowState::Committed && !self.dry_run {
                    self.republish(token, flow).await
                } else {
                    restored
                }
            }
        }
    }

    async fn republish(&self, token: &OrderToken, flow: &FlowRecord) -> Finding {
        let _span = tracing::info_span!("reconcile_republish", order_token = %token).entered();
        let finding = |outcome, detail: String| Finding {
            product_id: token.product_id().get(),
            kind: DiscrepancyKind::MissingOrder,
            order_token: Some(token.to_string()),
            action: Action::Republish,
            outcome,
            detail,
        };
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
        match self.publisher.publish(&order, None).await {
            Ok(()) => {
                tracing::info!(order_token = %token, "Missing order re-published.");
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
