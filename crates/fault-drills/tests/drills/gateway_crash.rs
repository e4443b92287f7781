//! Drills 1 and 2: the gateway dies in the middle of a purchase (a fail point aborts it),
//! and is started again.
//!
//! 1. After the Lua pre-deduct, before the half message: a unit is reserved in Redis and no
//!    message exists. Only reconcile can settle it: by policy it confirms and re-publishes
//!    the order, or gives the unit back.
//! 2. Inside the local transaction: the half message is stored and the flow reserved, but
//!    the broker never hears COMMIT. Its check-back, answered by the restarted gateway (the
//!    same producer group), runs confirm.lua and commits: the live path settles it alone.
//!
//! In both, the buyer whose purchase was cut is never answered, so the audit's "every 202
//! has an order" says nothing about that purchase: each drill checks what became of it.

use std::time::Duration;

use fault_drills::audit::audit_once;
use fault_drills::crowd::CUT;
use fault_drills::{CrowdOutcome, CrowdPlan, Drill, Sale, Service, Settle, settle_and_audit};

use crate::helpers::{CROWD_PROGRESS, SETTLE, aborted};

const STOCK: i64 = 30;
/// Reconcile leaves a flow younger than this alone; the drills' runs come after it.
const GRACE_SECS: &str = "2";

/// A flow with no message waits for reconcile: a run every 3 s while the drill settles.
fn settled_by_reconcile() -> Settle {
    Settle::within(SETTLE).reconciling_every(Duration::from_secs(3))
}

/// Starts the gateway with `fail_point` armed for the first purchase that reaches it, sends
/// a crowd, waits for the crash and restarts the gateway clean; the crowd goes on against
/// the restarted one. Returns once every buyer has an answer.
async fn crash_gateway_at(drill: &mut Drill, fail_point: &str) -> (Sale, CrowdOutcome) {
    drill.set_env("SECKILL_RECONCILE__GRACE_SECS", GRACE_SECS);
    drill.start(Service::Consumer).await;
    let armed = format!("{fail_point}=1*return");
    drill
        .start_with(Service::Gateway, &[("FAILPOINTS", armed.as_str())])
        .await;
    let sale = drill.open_sale(STOCK).await;
    let crowd = drill.crowd(&sale, CrowdPlan::steady(150, 25.0));

    let status = drill.until_exit(Service::Gateway, CROWD_PROGRESS).await;
    assert!(
        aborted(status),
        "the gateway should have crashed at {fail_point}, but ended with {status}"
    );
    drill.start(Service::Gateway).await;
    (sale, crowd.finish().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_killed_after_the_pre_deduct_leaves_a_unit_reconcile_turns_into_an_order() {
    let mut drill = Drill::begin("gateway_crash_after_pre_deduct").await;
    let (sale, outcome) = crash_gateway_at(&mut drill, "gateway::after_pre_deduct").await;

    let audit = settle_and_audit(&drill, &sale, &outcome, settled_by_reconcile()).await;

    // The cut purchase's unit is an order now, though its buyer never heard so.
    assert_eq!(
        audit.orders,
        outcome.accepted().count() + 1,
        "{audit}\n{outcome}"
    );
    eprintln!(
        "gateway crash after pre-deduct: {outcome}; settled by reconcile in {:?}",
        audit.settled_after
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_killed_after_the_pre_deduct_can_give_the_unit_back_by_policy() {
    let mut drill = Drill::begin("gateway_crash_restore").await;
    drill.set_env("SECKILL_RECONCILE__POLICY", "restore");
    let (sale, outcome) = crash_gateway_at(&mut drill, "gateway::after_pre_deduct").await;

    let audit = settle_and_audit(&drill, &sale, &outcome, settled_by_reconcile()).await;

    // Every order is a 202; the cut purchase's unit went back on sale.
    assert_eq!(
        audit.orders,
        outcome.accepted().count(),
        "{audit}\n{outcome}"
    );
    eprintln!(
        "gateway crash after pre-deduct, restore policy: {outcome}; settled in {:?}",
        audit.settled_after
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_killed_before_commit_reaches_the_broker_is_committed_by_the_check_back() {
    let mut drill = Drill::begin("gateway_crash_in_local_transaction").await;
    let (sale, outcome) = crash_gateway_at(&mut drill, "gateway::in_local_transaction").await;
    let after_restart = audit_once(&drill, &sale, &outcome).await;
    let accepted = outcome.accepted().count();

    // No reconcile yet, and no gateway sends a message twice: only the broker's check-back
    // can commit the purchase whose local transaction the crash cut.
    let committed = orders_within(&drill, &sale, &outcome, accepted + 1, SETTLE).await;
    assert!(
        committed > accepted,
        "the check-back committed no cut purchase within {SETTLE:?}: {committed} orders for \
         {accepted} accepted\n{outcome}"
    );

    // A buyer who came in as the gateway crashed may have reserved a unit whose message was
    // never sent (it waited behind the cut send): no half message, so no check-back, and
    // reconcile turns it into an order, as in the drills above. Every invariant is audited
    // once that is done.
    let audit = settle_and_audit(&drill, &sale, &outcome, settled_by_reconcile()).await;
    let cut = outcome.codes().get(CUT).copied().unwrap_or(0);
    assert!(
        (accepted + 1..=accepted + cut.max(1)).contains(&audit.orders),
        "{audit}\n{outcome}"
    );
    eprintln!(
        "gateway crash in the local transaction: {outcome}; {} orders right after the \
         restart, {committed} by check-back, settled in {:?}",
        after_restart.orders, audit.settled_after
    );
}

/// Waits up to `within` for MySQL to hold `orders` orders of the sale, auditing only (no
/// reconcile); returns how many it held last.
async fn orders_within(
    drill: &Drill,
    sale: &Sale,
    crowd: &CrowdOutcome,
    orders: usize,
    within: Duration,
) -> usize {
    let deadline = std::time::Instant::now() + within;
    loop {
        let held = audit_once(drill, sale, crowd).await.orders;
        if held >= orders || std::time::Instant::now() >= deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
