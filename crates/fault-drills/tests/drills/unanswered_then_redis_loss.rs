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

use fault_drills::stack::{self, Component};
use fault_drills::{CrowdPlan, Drill, Service, Settle, settle_and_audit};

use crate::helpers::{SETTLE, reload_until_done};

const STOCK: i64 = 20;
const BUYERS: u32 = 12;
const UNANSWERED: &str =
    "gateway::local_transaction_unanswered=return;gateway::check_back_unanswered=return";

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
