//! Drill 7: Redis is restarted with its data gone in the middle of a sale. The gateway must
//! refuse to sell the product (503, "not loaded") rather than sell from an empty state,
//! and an operator's reload (`POST /admin/v1/products/{id}/reload`) must rebuild it from
//! MySQL — after the orders still queued have been written — without selling a unit twice.

use fault_drills::stack::{self, Component};
use fault_drills::{CrowdPlan, Drill, Service, Settle, eventually, settle_and_audit};

use crate::helpers::{CROWD_PROGRESS, SETTLE, reload_until_done};

const STOCK: i64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sale_whose_redis_lost_its_data_is_refused_until_reloaded_and_never_oversold() {
    let mut drill = Drill::begin("redis_data_loss").await;
    drill.start(Service::Gateway).await;
    drill.start(Service::Consumer).await;
    let sale = drill.open_sale(STOCK).await;
    // 20 buyers a second for 15 s: Redis loses everything while units are being sold.
    let crowd = drill.crowd(&sale, CrowdPlan::steady(300, 20.0));
    crowd.until_accepted(10, CROWD_PROGRESS).await;

    stack::wipe(Component::Redis).await;
    let wiped_at = crowd.elapsed();
    let refused_at_wipe = crowd.answered() - crowd.accepted();
    eventually(CROWD_PROGRESS, "buyers refused after the loss", || {
        let refused = crowd.answered() - crowd.accepted();
        async move { (refused >= refused_at_wipe + 5).then_some(()) }
    })
    .await;
    let reload_asked_at = crowd.elapsed();
    let reloaded = reload_until_done(&drill, sale.product.get()).await;
    let outcome = crowd.finish().await;

    let sold_while_lost: Vec<_> = outcome
        .answers
        .iter()
        .filter(|a| a.sent >= wiped_at && a.answered <= reload_asked_at && a.is_accepted())
        .collect();
    assert!(
        sold_while_lost.is_empty(),
        "nothing is sold while Redis has lost the product: {sold_while_lost:?}"
    );
    let refused_while_lost: Vec<_> = outcome
        .answers
        .iter()
        .filter(|a| a.sent >= wiped_at && a.answered <= reload_asked_at)
        .collect();
    assert!(
        refused_while_lost.iter().all(|a| a.code() == "UNAVAILABLE"),
        "a purchase Redis cannot decide is refused as UNAVAILABLE (503): {refused_while_lost:?}"
    );

    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(SETTLE)).await;
    assert_eq!(audit.orders, outcome.accepted().count(), "{audit}");
    eprintln!(
        "redis data loss: {outcome}; reload restored {} orders, stock {}; settled in {:?}",
        reloaded["orders_restored"], reloaded["stock"], audit.settled_after
    );
}
