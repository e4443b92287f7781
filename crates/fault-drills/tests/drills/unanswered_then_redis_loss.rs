//! Drill 12: the local transaction gives no answer (as when confirm.lua times out), so the
//! gateway commits each buyer's flow itself and answers 202, while the half message waits
//! for the broker's check-back. Before that check-back comes, Redis loses everything and
//! an operator reloads the product from MySQL. A 202 must not depend on Redis surviving
//! that wait: the reload rebuilds only the flows of orders MySQL holds, and a check-back
//! that finds no flow rolls the message back.
//!
//! Two fail points of the gateway stand in for the timing: one makes every local
//! transaction answer "unknown", the other answers every check-back "unknown" until the
//! gateway is restarted without them — a check-back that comes after the wipe and the
//! reload, as it may in production (the broker asks every 30 s by default, and minutes
//! later under load).

use std::time::Duration;

use fault_drills::stack::{self, Component};
use fault_drills::{CrowdPlan, Drill, Service, Settle, eventually, settle_and_audit};
use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::SETTLE;

const STOCK: i64 = 20;
const BUYERS: u32 = 12;
/// config/local.toml's admin token, which the drills' services run with.
const ADMIN_TOKEN: &str = "dev-admin-token";
const UNANSWERED: &str =
    "gateway::local_transaction_unanswered=return;gateway::check_back_unanswered=return";

/// Asks the gateway to rebuild the product until it answers 200. Meanwhile it may answer
/// 409 ORDERS_IN_FLIGHT (queued orders are still being written) or 503 (its Redis
/// connections died with the wipe and are being replaced).
async fn reload_until_done(drill: &Drill, product: u64) -> Value {
    let url = format!(
        "{}/admin/v1/products/{product}/reload",
        drill.url(Service::Gateway)
    );
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("an HTTP client");
    eventually(SETTLE, "the reload to succeed", || {
        let request = client.post(&url).bearer_auth(ADMIN_TOKEN).send();
        async move {
            let response = request.await.ok()?;
            let status = response.status();
            let body: Value = response.json().await.ok()?;
            if status == StatusCode::OK {
                return Some(body);
            }
            assert!(
                matches!(
                    (status, body["error"]["code"].as_str()),
                    (StatusCode::CONFLICT, Some("ORDERS_IN_FLIGHT"))
                        | (StatusCode::SERVICE_UNAVAILABLE, Some("UNAVAILABLE"))
                ),
                "the reload can only wait for queued orders or for Redis: {status} {body}"
            );
            None
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buyers_accepted_after_an_unanswered_local_transaction_keep_their_orders_through_a_redis_loss()
 {
    let mut drill = Drill::begin("unanswered_then_redis_loss").await;
    drill
        .start_with(Service::Gateway, &[("FAILPOINTS", UNANSWERED)])
        .await;
    drill.start(Service::Consumer).await;
    let sale = drill.open_sale(STOCK).await;

    let outcome = drill
        .crowd(&sale, CrowdPlan::rush(BUYERS, 4))
        .finish()
        .await;
    assert_eq!(
        outcome.accepted().count(),
        BUYERS as usize,
        "every purchase is accepted once the gateway has committed its flow: {outcome}"
    );
    // Redis loses the product before any check-back is answered, and an operator reloads it.
    stack::wipe(Component::Redis).await;
    let reloaded = reload_until_done(&drill, sale.product.get()).await;

    // Now the check-backs are answered, from what the reload rebuilt.
    drill.kill(Service::Gateway).await;
    drill.start(Service::Gateway).await;

    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(SETTLE)).await;
    assert_eq!(audit.orders, outcome.accepted().count(), "{audit}");
    eprintln!(
        "unanswered local transactions, then a Redis loss: {outcome}; the reload restored {} \
         orders; settled in {:?}",
        reloaded["orders_restored"], audit.settled_after
    );
}
