//! Drill 8: SIGTERM to each service while a sale is on. Each must stop gracefully — the
//! gateway stops taking connections and answers the requests it holds, the consumer
//! finishes (or hands back) the batch it holds, reconcile stops between runs — and exit 0
//! within its grace period; restarted, the system settles with nothing lost.

use std::time::Duration;

use fault_drills::crowd::CUT;
use fault_drills::{CrowdPlan, Drill, Service, Settle, settle_and_audit};

use crate::helpers::{CROWD_PROGRESS, SETTLE};

const STOCK: i64 = 60;
/// The gateway drill's: enough that purchases are still winning when the SIGTERM lands.
const GATEWAY_STOCK: i64 = 200;

/// Buyers in flight at once when the gateway is stopped.
const CONCURRENCY: usize = 32;
/// The gateway's `shutdown_grace_secs` in this drill.
const GATEWAY_GRACE: Duration = Duration::from_secs(5);
/// What a stop may take beyond the grace: closing the producer and the client runtime.
const CLOSING: Duration = Duration::from_secs(10);
/// The consumer waits up to 30 s for the batches in hand (order-queue's SHUTDOWN_GRACE_MS).
const CONSUMER_GRACE: Duration = Duration::from_secs(30);
/// How long the consumer's first batch is held before it is written: long enough for the
/// SIGTERM to land while the consumer holds it.
const HELD_BATCH: &str = "consumer::before_commit=1*sleep(3000)";
/// Reconcile's daemon has no grace setting: it finishes the run in hand, then stops.
const RECONCILE_GRACE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_stopped_mid_sale_answers_the_requests_it_holds_and_exits_cleanly() {
    let mut drill = Drill::begin("sigterm_gateway").await;
    drill.set_env(
        "SECKILL_GATEWAY__SHUTDOWN_GRACE_SECS",
        &GATEWAY_GRACE.as_secs().to_string(),
    );
    drill.start(Service::Gateway).await;
    drill.start(Service::Consumer).await;
    let sale = drill.open_sale(GATEWAY_STOCK).await;
    // Buyers always in flight: the SIGTERM finds requests inside the gateway.
    let crowd = drill.crowd(&sale, CrowdPlan::rush(3000, CONCURRENCY));
    crowd.until_accepted(20, CROWD_PROGRESS).await;

    let signalled_at = crowd.elapsed();
    let stopped = drill
        .terminate(Service::Gateway, GATEWAY_GRACE + CLOSING)
        .await;
    assert!(
        stopped.status.success(),
        "the gateway exits 0 on SIGTERM, not {}",
        stopped.status
    );
    drill.start(Service::Gateway).await;
    let outcome = crowd.finish().await;

    let in_flight = outcome
        .answers
        .iter()
        .filter(|a| a.sent < signalled_at && a.answered > signalled_at && a.code() != CUT)
        .count();
    assert!(
        in_flight >= 1,
        "requests in the gateway at SIGTERM are answered after it: {outcome}"
    );
    assert!(
        outcome.server_errors().is_empty(),
        "{:?}",
        outcome.server_errors()
    );
    // Connections still in the listen backlog when the listener closes are reset by the
    // kernel: their requests never reached the gateway. The audit shows that none of them
    // bought anything (orders = purchases answered 202), so a buyer cut off may retry.
    let cut = outcome.answers.iter().filter(|a| a.code() == CUT).count();
    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(SETTLE)).await;
    assert_eq!(
        audit.orders,
        outcome.accepted().count(),
        "a purchase without a 202 bought nothing: {audit}"
    );
    eprintln!(
        "SIGTERM to the gateway: stopped in {:?}, {in_flight} requests in flight answered, \
         {cut} cut off before the gateway took them; {outcome}",
        stopped.took
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_stopped_while_it_holds_a_batch_writes_it_and_exits_cleanly() {
    let mut drill = Drill::begin("sigterm_consumer").await;
    drill.start(Service::Gateway).await;
    // One batch at a time, so that while the first is held no other is written.
    drill
        .start_with(
            Service::Consumer,
            &[
                ("FAILPOINTS", HELD_BATCH),
                ("SECKILL_CONSUMER__CONCURRENCY", "1"),
            ],
        )
        .await;
    let sale = drill.open_sale(STOCK).await;
    let crowd = drill.crowd(&sale, CrowdPlan::steady(200, 20.0));
    // A batch has reached the writer (its size is recorded first) and is not written yet.
    let consumer = drill.url(Service::Consumer);
    fault_drills::eventually(CROWD_PROGRESS, "the consumer holding a batch", || {
        let drill = &drill;
        async move {
            let taken = drill
                .metric(Service::Consumer, "seckill_consumer_batch_size_count")
                .await;
            let written = drill
                .metric(Service::Consumer, "seckill_orders_written_total")
                .await;
            (taken >= 1.0 && written == 0.0).then_some(())
        }
    })
    .await;

    let stopped = drill
        .terminate(Service::Consumer, CONSUMER_GRACE + CLOSING)
        .await;
    assert!(
        stopped.status.success(),
        "the consumer ({consumer}) exits 0 on SIGTERM, not {}",
        stopped.status
    );
    drill.until_mysql_idle(Duration::from_secs(10)).await;
    let written_before_exit = drill.count("SELECT COUNT(*) AS n FROM orders").await;
    assert!(
        written_before_exit >= 1,
        "the batch in hand at SIGTERM was written before the consumer exited"
    );

    drill.start(Service::Consumer).await;
    let outcome = crowd.finish().await;
    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(SETTLE)).await;
    assert_eq!(audit.orders, outcome.accepted().count(), "{audit}");
    eprintln!(
        "SIGTERM to the consumer: stopped in {:?} with {written_before_exit} orders written; \
         {outcome}",
        stopped.took
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reconciler_stopped_mid_sale_leaves_no_run_open_and_exits_cleanly() {
    let mut drill = Drill::begin("sigterm_reconciler").await;
    drill.start(Service::Gateway).await;
    drill.start(Service::Consumer).await;
    // A run every second, so the SIGTERM comes while runs are going on.
    drill
        .start_with(
            Service::Reconciler,
            &[("SECKILL_RECONCILE__SCHEDULE", "* * * * * *")],
        )
        .await;
    let sale = drill.open_sale(STOCK).await;
    let crowd = drill.crowd(&sale, CrowdPlan::steady(200, 20.0));
    crowd.until_accepted(10, CROWD_PROGRESS).await;
    fault_drills::eventually(CROWD_PROGRESS, "a scheduled reconcile run", || async {
        (drill.count("SELECT COUNT(*) AS n FROM reconcile_run").await >= 1).then_some(())
    })
    .await;

    let stopped = drill.terminate(Service::Reconciler, RECONCILE_GRACE).await;
    assert!(
        stopped.status.success(),
        "reconcile-svc exits 0 on SIGTERM, not {}",
        stopped.status
    );
    let open_runs = drill
        .count("SELECT COUNT(*) AS n FROM reconcile_run WHERE finished_at IS NULL")
        .await;
    assert_eq!(open_runs, 0, "no run is left half done");
    let leases = drill.count("SELECT COUNT(*) AS n FROM lease").await;
    assert_eq!(leases, 0, "the reconcile lease is given back");

    let outcome = crowd.finish().await;
    // Its final `reconcile-svc --once` also needs the lease to be free.
    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(SETTLE)).await;
    assert_eq!(audit.orders, outcome.accepted().count(), "{audit}");
    eprintln!(
        "SIGTERM to reconcile-svc: stopped in {:?}; {outcome}",
        stopped.took
    );
}
