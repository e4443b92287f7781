//! Drill 4: order-consumer-svc dies in the middle of a batch — before the batch's MySQL
//! transaction commits, and after it commits but before the batch is marked confirmed and
//! acknowledged. The broker redelivers whatever was never acknowledged; the order token's
//! unique key turns the second write of a committed batch into nothing.
//!
//! `consumer::before_commit` sits just before the batch's transaction begins. A crash inside
//! the open transaction would leave nothing different: the dead connection's transaction is
//! rolled back by MariaDB, and the batch was not acknowledged either way.

use std::time::Duration;

use fault_drills::audit::audit_once;
use fault_drills::{CrowdOutcome, CrowdPlan, Drill, Sale, Service, Settle, settle_and_audit};

use crate::helpers::{SETTLE, aborted};

const STOCK: i64 = 40;
const BUYERS: u32 = 120;
/// Up to the crash: the consumer starts, joins its group and takes its first batch.
const UNTIL_CRASH: Duration = Duration::from_secs(60);

/// Sells out with no consumer running, so the orders wait in the broker and the consumer's
/// first batches are full ones (the backlog over 4 queues), several written at once: the
/// crash then lands in the middle of real batches, not on a lone message.
async fn sell_out_before_any_consumer(drill: &mut Drill) -> (Sale, CrowdOutcome) {
    drill.start(Service::Gateway).await;
    let sale = drill.open_sale(STOCK).await;
    let outcome = drill
        .crowd(&sale, CrowdPlan::rush(BUYERS, 16))
        .finish()
        .await;
    assert_eq!(
        outcome.accepted().count(),
        STOCK as usize,
        "every unit is sold: {outcome}"
    );
    (sale, outcome)
}

/// Starts the consumer with `fail_point` armed for its first batch and waits for the crash.
async fn crash_consumer_at(drill: &mut Drill, fail_point: &str) {
    let armed = format!("{fail_point}=1*return");
    drill
        .spawn_with(Service::Consumer, &[("FAILPOINTS", armed.as_str())])
        .await;
    let status = drill.until_exit(Service::Consumer, UNTIL_CRASH).await;
    assert!(
        aborted(status),
        "the consumer should have crashed at {fail_point}, but ended with {status}"
    );
    // A COMMIT the dead process sent may still be finishing on the server.
    drill.until_mysql_idle(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_killed_before_its_batch_commits_loses_no_order_once_restarted() {
    let mut drill = Drill::begin("consumer_crash_before_commit").await;
    let (sale, outcome) = sell_out_before_any_consumer(&mut drill).await;

    crash_consumer_at(&mut drill, "consumer::before_commit").await;
    let at_crash = audit_once(&drill, &sale, &outcome).await;
    assert!(
        at_crash.orders < STOCK as usize,
        "the crashed batch's orders are not in MySQL yet:\n{at_crash}"
    );

    drill.start(Service::Consumer).await;
    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(SETTLE)).await;

    assert_eq!(audit.orders, STOCK as usize, "{audit}");
    let written = drill
        .metric(Service::Consumer, "seckill_orders_written_total")
        .await;
    assert_eq!(
        written as usize,
        STOCK as usize - at_crash.orders,
        "the restarted consumer wrote exactly the orders the crash left unwritten"
    );
    eprintln!(
        "consumer crash before commit: {} orders in MySQL at the crash, {written} written \
         after the restart; settled in {:?}",
        at_crash.orders, audit.settled_after
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_killed_after_its_batch_commits_writes_no_order_twice_once_restarted() {
    let mut drill = Drill::begin("consumer_crash_after_commit").await;
    let (sale, outcome) = sell_out_before_any_consumer(&mut drill).await;

    crash_consumer_at(&mut drill, "consumer::after_commit").await;
    let at_crash = audit_once(&drill, &sale, &outcome).await;
    assert!(
        at_crash.orders > 0 && at_crash.accepted_confirmed < at_crash.orders,
        "the crashed batch is in MySQL but not confirmed in Redis:\n{at_crash}"
    );

    drill.start(Service::Consumer).await;
    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(SETTLE)).await;

    assert_eq!(audit.orders, STOCK as usize, "{audit}");
    let written = drill
        .metric(Service::Consumer, "seckill_orders_written_total")
        .await;
    let duplicates = drill
        .metric(Service::Consumer, "seckill_orders_duplicate_total")
        .await;
    assert_eq!(
        written as usize,
        STOCK as usize - at_crash.orders,
        "the restarted consumer wrote only the orders that were not in MySQL"
    );
    assert!(
        duplicates >= 1.0,
        "the committed, unacknowledged batch came again and was recognised as written"
    );
    eprintln!(
        "consumer crash after commit: {} orders in MySQL at the crash ({} confirmed), \
         {written} written and {duplicates} redelivered duplicates after the restart; \
         settled in {:?}",
        at_crash.orders, at_crash.accepted_confirmed, audit.settled_after
    );
}
