//! Drill 11: the broker stores half messages but answers FLUSH_DISK_TIMEOUT. The RocketMQ
//! client then ends the transaction with ROLLBACK without running the local transaction
//! (rocketmq-client-rust 1.0 does so for FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and
//! SLAVE_NOT_AVAILABLE), so confirm.lua never ran and the buyer's flow is still reserved
//! when the gateway hears "rollback". The gateway must give it back before it answers 503:
//! a flow left reserved is turned into an order by reconcile once its grace window has
//! passed, for a buyer who was told the purchase failed.
//!
//! The broker here is a real one with `flushDiskType = SYNC_FLUSH` and a
//! `syncFlushTimeout` of 0: a send waits no time at all for its flush, and the broker
//! answers FLUSH_DISK_TIMEOUT for (nearly) every message while storing it all the same.
//! Reconcile runs while the sale settles, so a flow left reserved would be re-published.

use std::time::Duration;

use fault_drills::stack::BrokerSettings;
use fault_drills::{CrowdPlan, Drill, Service, Settle, settle_and_audit};

use crate::helpers::SETTLE;

const STOCK: i64 = 30;
const BUYERS: u32 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buyers_refused_because_the_broker_answered_a_flush_timeout_never_get_an_order() {
    let mut drill = Drill::begin("broker_flush_timeout").await;
    // Before the services start: a client that saw the broker go away keeps it closed a while.
    let _broker = BrokerSettings::apply(&[
        ("SECKILL_MQ_FLUSH_DISK_TYPE", "SYNC_FLUSH"),
        ("SECKILL_MQ_SYNC_FLUSH_TIMEOUT_MS", "0"),
    ])
    .await;
    drill.start(Service::Gateway).await;
    drill.start(Service::Consumer).await;
    let sale = drill.open_sale(STOCK).await;

    let outcome = drill
        .crowd(&sale, CrowdPlan::rush(BUYERS, 8))
        .finish()
        .await;

    // The fault must have happened where intended: messages rolled back by the client.
    let rolled_back = drill
        .metric_where(
            Service::Gateway,
            "seckill_purchases_total",
            r#"outcome="rolled_back""#,
        )
        .await;
    assert!(
        rolled_back >= 1.0,
        "the broker's flush timeouts rolled no purchase back: {outcome}"
    );
    assert_eq!(
        outcome.unavailable_tokens().len(),
        outcome
            .answers
            .iter()
            .filter(|a| a.is_unavailable())
            .count(),
        "every purchase answered 503 names its order token: {outcome}"
    );

    let audit = settle_and_audit(
        &drill,
        &sale,
        &outcome,
        Settle::within(SETTLE).reconciling_every(Duration::from_secs(3)),
    )
    .await;
    assert_eq!(audit.unavailable_ordered, 0, "{audit}");
    assert_eq!(audit.orders, outcome.accepted().count(), "{audit}");
    eprintln!(
        "broker flush timeouts: {outcome}; {rolled_back} purchases rolled back; settled in {:?}",
        audit.settled_after
    );
}
