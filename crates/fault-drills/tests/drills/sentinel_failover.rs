//! Drill: Redis Sentinel fails the primary over to its replica (`SENTINEL FAILOVER`) in the
//! middle of a sale. The three services run with `redis.mode = "sentinel"` on a group of the
//! drill's own (a primary, a replica, three sentinels) and `redis.wait_replicas = 1`, so a
//! purchase is accepted only once the replica holds its reservation, and a unit given back
//! only once the replica holds the release.
//!
//! Sentinel promotes the replica at once but demotes the old primary only seconds later, at
//! its own pace; until then the new primary has no replica to acknowledge a reservation, and
//! the old primary none either, so every winner meanwhile is answered 503 and its unit given
//! back. Once the old primary is demoted and follows the new one, the gateway must sell again
//! within seconds; and once the system has settled, every promise holds: each accepted
//! purchase is an order, nothing is sold twice, and a purchase answered 503 holds no order.

use std::time::Duration;

use fault_drills::{CrowdOutcome, CrowdPlan, Drill, Service, Settle, eventually, settle_and_audit};
use test_support::redis::TestRedis;
use test_support::redis_topology::SentinelGroup;

use crate::helpers::{CROWD_PROGRESS, SETTLE, answer, client};

const STOCK: i64 = 120;
/// From the old primary's demotion (the new primary has a replica again) to the first
/// purchase accepted: a gateway that takes longer is not following the new primary.
const FOLLOWS_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sentinel_failover_mid_sale_is_followed_within_seconds_and_every_promise_holds() {
    let group = SentinelGroup::start().await;
    let mut drill = Drill::begin("sentinel_failover").await;
    let primary = group.primary_url().await;
    drill.use_redis(TestRedis::on_sentinel(
        &group.sentinel_urls(),
        group.master_name(),
        &primary,
    ));
    drill.set_env("SECKILL_REDIS__WAIT_REPLICAS", "1");
    drill.set_env("SECKILL_REDIS__WAIT_TIMEOUT_MS", "500");
    drill.start(Service::Gateway).await;
    drill.start(Service::Consumer).await;
    let sale = drill.open_sale(STOCK).await;
    // 20 buyers a second for 40 s: the failover, which takes Sentinel some 10 s, comes while
    // units are being sold, and leaves units and buyers for after it.
    let crowd = drill.crowd(&sale, CrowdPlan::steady(800, 20.0));
    crowd.until_accepted(20, CROWD_PROGRESS).await;

    let asked_at = crowd.elapsed();
    let new_primary = group.failover().await;
    let promoted_at = crowd.elapsed();
    assert_ne!(new_primary, primary);
    let accepted_at_promotion = crowd.accepted();
    eventually(
        CROWD_PROGRESS,
        "purchases accepted after the failover",
        || {
            let accepted = crowd.accepted();
            async move { (accepted >= accepted_at_promotion + 10).then_some(()) }
        },
    )
    .await;
    let outcome = crowd.finish().await;

    let first_after = outcome
        .answers
        .iter()
        .filter(|a| a.is_accepted() && a.sent >= promoted_at)
        .map(|a| a.answered - promoted_at)
        .min()
        .expect("a purchase accepted after the failover");
    assert!(
        first_after < FOLLOWS_WITHIN,
        "the gateway sold from the new primary {first_after:?} after the old one was demoted"
    );
    // A token request or a purchase that meets the failover may be answered 503 UNAVAILABLE
    // (Redis cannot be reached), as the API allows; any other 5xx breaks the contract.
    let failed: Vec<_> = outcome
        .answers
        .iter()
        .filter(|a| a.is_server_error() && a.code() != "UNAVAILABLE")
        .collect();
    assert!(
        failed.is_empty(),
        "a request the failover caught is refused as UNAVAILABLE (503), nothing worse: {failed:?}"
    );

    // The consumer's "confirmed" marks that the old primary took after the promotion are
    // lost with it. A buyer polling such an order is answered from MySQL, and the gateway
    // writes the mark again: every buyer told 202 sees the order confirmed.
    each_buyer_sees_their_order_confirmed(&drill, &outcome).await;
    // A flow the failover stranded (its confirmation taken by the old primary after the
    // promotion) is reconcile's to settle.
    let settle = Settle::within(SETTLE).reconciling_every(Duration::from_secs(5));
    let audit = settle_and_audit(&drill, &sale, &outcome, settle).await;
    assert_eq!(audit.orders, outcome.accepted().count(), "{audit}");
    eprintln!(
        "sentinel failover: {outcome}; the failover took {:?}, and the first sale from the new \
         primary came {first_after:?} after it; settled in {:?}",
        promoted_at - asked_at,
        audit.settled_after
    );
}

/// Polls each accepted purchase's order as its buyer would, until every one is confirmed.
async fn each_buyer_sees_their_order_confirmed(drill: &Drill, outcome: &CrowdOutcome) {
    let client = client();
    for accepted in outcome.accepted() {
        let order = accepted
            .order_token()
            .expect("an accepted purchase names its order");
        let url = format!("{}/api/v1/orders/{order}", drill.url(Service::Gateway));
        eventually(
            SETTLE,
            &format!("order {order} confirmed to its buyer"),
            || {
                let request = client.get(&url).header("X-User-Id", accepted.user).send();
                async move {
                    let (_, body) = answer(request.await.ok()?).await;
                    (body["status"] == "confirmed").then_some(())
                }
            },
        )
        .await;
    }
}
