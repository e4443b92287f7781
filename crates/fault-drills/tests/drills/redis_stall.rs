//! Drill 9: Redis stops answering for a second in the middle of a sale (its process frozen
//! with SIGSTOP, as a long fork, a paused VM or a swapped-out host would leave it) and then
//! goes on. Purchases whose pre-deduct went unanswered are refused (503), but their scripts
//! were sent: Redis runs them once it goes on, and each would reserve a unit for a buyer who
//! was told the purchase failed — and that no message will ever carry. The gateway gives
//! such a token back (`release.lua`), so once the sale settles nothing is left reserved, no
//! buyer told 503 has an order, and reconcile finds nothing to repair.
//!
//! The consumer starts after the stall: its own Redis calls are not what this drill is about.

use std::time::Duration;

use fault_drills::stack::Component;
use fault_drills::{CrowdPlan, Drill, Service, Settle, settle_and_audit};
use redis::AsyncCommands;

use crate::helpers::{CROWD_PROGRESS, SETTLE};

const STOCK: i64 = 60;
/// The gateway's `redis.timeout_ms`: a stalled call is given up well inside the stall.
const REDIS_TIMEOUT_MS: &str = "300";
const STALL: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buyers_refused_while_redis_stalled_hold_no_unit_once_it_goes_on() {
    let mut drill = Drill::begin("redis_stall").await;
    drill
        .start_with(
            Service::Gateway,
            &[("SECKILL_REDIS__TIMEOUT_MS", REDIS_TIMEOUT_MS)],
        )
        .await;
    let sale = drill.open_sale(STOCK).await;
    // Every buyer holds a token before the purchases start: the stall meets purchases.
    let crowd = drill.crowd(&sale, CrowdPlan::steady(120, 20.0).tokens_first());
    crowd.until_accepted(10, CROWD_PROGRESS).await;

    drill.freeze_component(Component::Redis).await;
    let frozen_at = crowd.elapsed();
    // The stall itself lasts a fixed time; nothing to poll for.
    tokio::time::sleep(STALL).await;
    drill.thaw_component(Component::Redis).await;
    let thawed_at = crowd.elapsed();
    let outcome = crowd.finish().await;

    let refused_in_stall: Vec<_> = outcome
        .answers
        .iter()
        .filter(|a| a.sent >= frozen_at && a.sent < thawed_at && !a.is_accepted())
        .collect();
    assert!(
        !refused_in_stall.is_empty(),
        "buyers must meet the stall, or the drill proves nothing: {outcome}"
    );
    assert!(
        refused_in_stall.iter().all(|a| a.code() == "UNAVAILABLE"),
        "a purchase Redis did not answer is refused as UNAVAILABLE (503): {refused_in_stall:?}"
    );

    drill.start(Service::Consumer).await;
    // No reconcile runs while settling: the gateway alone must leave no unit reserved.
    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(SETTLE)).await;
    assert_eq!(
        audit.orders,
        outcome.accepted().count(),
        "an order for every buyer answered 202, and for nobody else:\n{audit}"
    );
    let given_back = tokens_given_back_after_no_answer(&drill, &sale).await;
    assert!(
        given_back > 0,
        "some pre-deduct was sent to the stalled Redis and given back: {outcome}"
    );
    eprintln!(
        "redis stall: {outcome}; {} refused during the {STALL:?} stall, {given_back} tokens \
         given back after an unanswered pre-deduct; settled {:?} after the consumer started",
        refused_in_stall.len(),
        audit.settled_after
    );
}

/// Tombstones `release.lua` wrote for purchases whose pre-deduct got no answer: a unit given
/// back (the late script ran first) or a token barred before its late script could run.
async fn tokens_given_back_after_no_answer(drill: &Drill, sale: &fault_drills::Sale) -> usize {
    let keys = drill.stack.redis.cache().keys(sale.product);
    let tombstones: std::collections::HashMap<String, String> = drill
        .stack
        .redis
        .connection()
        .await
        .hgetall(&keys.tomb)
        .await
        .unwrap();
    tombstones
        .values()
        .filter(|reason| reason.contains(r#""reason":"pre_deduct_unanswered""#))
        .count()
}
