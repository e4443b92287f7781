//! Drill 5: the RocketMQ broker is killed (SIGKILL) in the middle of a sale and started
//! again. Purchases that cannot be sent while it is down are refused (503) and their units
//! go back on sale; every purchase answered 202 must still become an order — from the
//! committed messages the broker kept through the kill, and through check-backs for the
//! transactions whose end it never heard.
//!
//! The consumer is behind during the sale (it starts once the broker is back), so every
//! accepted order is still a message in the broker's store when the broker dies: the drill
//! shows they survive the kill, not that a consumer had already taken them.

use std::time::Duration;

use fault_drills::audit::audit_once;
use fault_drills::stack::Component;
use fault_drills::{CrowdPlan, Drill, Service, Settle, settle_and_audit};

use crate::helpers::{CROWD_PROGRESS, SETTLE};

const STOCK: i64 = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_purchase_accepted_around_a_broker_crash_becomes_an_order() {
    let mut drill = Drill::begin("broker_crash").await;
    drill.start(Service::Gateway).await;
    let sale = drill.open_sale(STOCK).await;
    // 20 buyers a second for 10 s: the broker dies while purchases are being sent.
    let crowd = drill.crowd(&sale, CrowdPlan::steady(200, 20.0));
    crowd.until_accepted(20, CROWD_PROGRESS).await;

    drill.kill_component(Component::Broker).await;
    let killed_at = crowd.elapsed();
    let accepted_at_kill = crowd.accepted();
    let refused_at_kill = crowd.answered() - accepted_at_kill;
    // Buyers must feel the outage, or the drill proves nothing about it.
    fault_drills::eventually(
        CROWD_PROGRESS,
        "a buyer refused while the broker is down",
        || {
            let refused = crowd.answered() - crowd.accepted();
            async move { (refused > refused_at_kill).then_some(()) }
        },
    )
    .await;
    drill.start_component(Component::Broker).await;
    let back_at = crowd.elapsed();
    let outcome = crowd.finish().await;

    let before_consuming = audit_once(&drill, &sale, &outcome).await;
    assert_eq!(
        before_consuming.orders, 0,
        "no consumer has run yet:\n{before_consuming}"
    );
    let refused_in_outage: Vec<_> = outcome
        .answers
        .iter()
        .filter(|a| a.sent >= killed_at && a.answered <= back_at && !a.is_accepted())
        .collect();
    assert!(!refused_in_outage.is_empty(), "{outcome}");
    assert!(
        refused_in_outage.iter().all(|a| a.code() == "UNAVAILABLE"),
        "a purchase the broker could not take is refused as UNAVAILABLE (503): \
         {refused_in_outage:?}"
    );

    drill.start(Service::Consumer).await;
    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(SETTLE)).await;
    assert_eq!(audit.orders, outcome.accepted().count(), "{audit}");
    eprintln!(
        "broker crash: {outcome}; {accepted_at_kill} accepted before the kill, {} after the \
         broker was back; settled {:?} after the consumer started",
        outcome.accepted_within(back_at, Duration::MAX),
        audit.settled_after
    );
}
