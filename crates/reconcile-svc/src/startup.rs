//! Wiring: stores, the re-publishing producer, the schedule and the HTTP endpoints.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use anyhow::Context;
use chrono::Utc;
use domain::{OrderPlaced, OrderToken};
use order_queue::{LocalTransaction, MqRuntime, OrderPublisher, TxDecision};
use order_store::Db;
use platform::ops::{self, OpsState};
use platform::shutdown::Shutdown;
use secrecy::SecretString;
use serde_json::json;

use crate::audit::{Auditor, Policy};
use crate::settings::Settings;

/// Connections to MySQL and to Redis, each. One run at a time holds the lease, and a run
/// takes one step at a time, overlapping at most the next Redis page with the MySQL read of
/// this one: a few connections serve it.
const STORE_POOL_SIZE: usize = 4;

/// The RocketMQ client's blocking pool. Reconcile sends plain messages only (no local
/// transaction, no check-back to answer), so the pool has next to nothing to run.
const MQ_BLOCKING_PARALLELISM: usize = 4;

/// Reconcile only ever sends plain messages (re-publish), never half messages, so the
/// broker has nothing to check back on in its producer group.
struct NoHalfMessages;

impl LocalTransaction for NoHalfMessages {
    fn execute(&self, _: &[OrderPlaced], _: &tracing::Span) -> TxDecision {
        TxDecision::Unknown
    }

    fn check(&self, _: &[OrderToken]) -> TxDecision {
        TxDecision::Unknown
    }
}

pub struct Application {
    pub auditor: Arc<Auditor>,
    pub policy: Policy,
    settings: Settings,
    mq_runtime: MqRuntime,
}

impl Application {
    /// `policy` overrides the configured one; `dry_run` makes every repair only say what it
    /// would do.
    pub async fn build(
        settings: Settings,
        policy: Option<Policy>,
        dry_run: bool,
    ) -> anyhow::Result<Self> {
        let policy = match policy {
            Some(policy) => policy,
            None => Policy::from_str(&settings.reconcile.policy).map_err(anyhow::Error::msg)?,
        };
        let mysql = settings.mysql.endpoint().context("cannot set up MySQL")?;
        order_store::migrate(&mysql)
            .await
            .context("cannot migrate MySQL")?;
        let db = Db::connect(&mysql, STORE_POOL_SIZE).context("cannot set up MySQL")?;
        let cache = settings
            .redis
            .open(STORE_POOL_SIZE)
            .context("cannot set up Redis")?;
        let mq_runtime = MqRuntime::new("reconcile", MQ_BLOCKING_PARALLELISM)
            .context("cannot start the MQ client")?;
        let mut mq = settings.rocketmq.clone();
        mq.producer_group = format!("{}-reconcile", mq.producer_group);
        let publisher = Arc::new(
            OrderPublisher::start(&mq_runtime, &mq, Arc::new(NoHalfMessages))
                .await
                .context("cannot start the producer")?,
        );
        let holder = platform::instance::holder_id("reconcile");
        let auditor = Arc::new(Auditor {
            db,
            cache,
            publisher,
            grace: Duration::from_secs(settings.reconcile.grace_secs),
            expiry_grace: Duration::from_secs(settings.orders.expiry_grace_secs),
            scan_batch: settings.reconcile.scan_batch.max(1),
            holder,
            lease_ttl: Duration::from_secs(settings.reconcile.lease_secs.max(1)),
            dry_run,
        });
        Ok(Self {
            auditor,
            policy,
            settings,
            mq_runtime,
        })
    }

    /// Closes the producer and the client runtime.
    pub async fn close(self) {
        self.auditor.publisher.shutdown().await;
        self.mq_runtime.shutdown().await;
    }

    /// Daemon mode: serves the ops endpoints and the latest report, and runs on the cron
    /// schedule until `shutdown` fires (between runs, or after the current one).
    pub async fn run_daemon(self, shutdown: Shutdown) -> anyhow::Result<()> {
        let schedule = croner::Cron::new(&self.settings.reconcile.schedule)
            .with_seconds_optional()
            .parse()
            .with_context(|| {
                format!(
                    "bad reconcile schedule `{}`",
                    self.settings.reconcile.schedule
                )
            })?;
        let auditor = self.auditor.clone();
        let ready = ops::readiness({
            let auditor = auditor.clone();
            move || {
                let auditor = auditor.clone();
                async move {
                    auditor
                        .cache
                        .ping()
                        .await
                        .map_err(|e| format!("Redis: {e}"))?;
                    auditor.db.ping().await.map_err(|e| format!("MySQL: {e}"))
                }
            }
        });
        let reports = web::Data::new(ReportState {
            db: auditor.db.clone(),
            admin_token: self.settings.admin.token.clone(),
        });
        let (port, server, handle) = ops::serve(
            &self.settings.reconcile.listen,
            OpsState {
                ready,
                metrics: ops::metrics_handle(),
            },
            move |cfg| {
                cfg.app_data(reports.clone())
                    .route("/api/v1/reconcile/runs/latest", web::get().to(latest_run));
            },
        )
        .with_context(|| format!("cannot bind {}", self.settings.reconcile.listen))?;
        let server = tokio::spawn(server);
        tracing::info!(port, schedule = %self.settings.reconcile.schedule, "Reconcile daemon running.");

        loop {
            let next = schedule
                .find_next_occurrence(&Utc::now(), false)
                .context("the schedule has no next run")?;
            let wait = (next - Utc::now()).to_std().unwrap_or_default();
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.cancelled() => break,
            }
            match auditor.run(self.policy, None).await {
                Ok(report) => {
                    tracing::info!(run_id = report.run_id, status = %report.status, unresolved = report.unresolved(), "Reconcile run finished.")
                }
                Err(error) => tracing::error!(error = ?error, "Reconcile run failed."),
            }
        }
        handle.stop(true).await;
        let _ = server.await;
        self.close().await;
        Ok(())
    }
}

struct ReportState {
    db: Db,
    admin_token: SecretString,
}

async fn latest_run(state: web::Data<ReportState>, request: HttpRequest) -> HttpResponse {
    let error = |status: actix_web::http::StatusCode, code: &str, message: &str| {
        HttpResponse::build(status).json(json!({"error": {"code": code, "message": message}}))
    };
    use actix_web::http::StatusCode;
    if !platform::auth::is_admin(&request, &state.admin_token) {
        return error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            "a valid admin token is required",
        );
    }
    match state.db.latest_run().await {
        Ok(Some(run)) => match run.report {
            Some(report) => HttpResponse::Ok()
                .content_type("application/json")
                .body(report),
            None => {
                HttpResponse::Ok().json(json!({"run_id": run.id, "status": run.status.as_str()}))
            }
        },
        Ok(None) => error(StatusCode::NOT_FOUND, "NOT_FOUND", "no reconcile run yet"),
        Err(e) => {
            tracing::warn!(error = ?e, "Cannot read the latest run.");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "UNAVAILABLE",
                "MySQL cannot be reached",
            )
        }
    }
}
