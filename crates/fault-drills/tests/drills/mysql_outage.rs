//! Drill 6: MariaDB is stopped for 30 s while orders flow. The gateway does not need MySQL
//! to sell (Redis and the broker do the purchase), so it keeps answering 202; the consumer's
//! batches fail and go back to the broker, which redelivers them after its backoff (10 s,
//! 30 s, …) — no retry loop of the consumer's own, so it must not spin; once MariaDB is back
//! the consumer catches up and nothing is lost. Meanwhile the gateway stays ready (its
//! readiness asks Redis only) and the consumer does not (it asks MySQL).

use std::time::{Duration, Instant};

use fault_drills::stack::Component;
use fault_drills::{CrowdPlan, Drill, Service, Settle, settle_and_audit};

use crate::helpers::CROWD_PROGRESS;

const STOCK: i64 = 60;
const OUTAGE: Duration = Duration::from_secs(30);
/// A batch that failed during the outage is tried again 10 s later and then 30 s after
/// that (the broker's reconsume delays), so the last ones land up to ~40 s after MariaDB
/// is back; the rest is room for a loaded machine.
const CATCH_UP: Duration = Duration::from_secs(90);
/// Per order, the attempts that can fail within a 30 s outage: the first and the one 10 s
/// later (the next comes 30 s after that). One more for slack; a consumer that retried on
/// its own without backing off would fail hundreds of times a second.
const FAILED_ATTEMPTS_PER_ORDER: f64 = 3.0;
/// Of one core, while every batch fails: a consumer waiting for redeliveries is idle; one
/// spinning on the failure keeps a core busy.
const IDLE_CPU_SHARE: f64 = 0.10;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_30_second_mysql_outage_loses_no_order_and_does_not_make_the_consumer_spin() {
    let mut drill = Drill::begin("mysql_outage").await;
    drill.start(Service::Gateway).await;
    drill.start(Service::Consumer).await;
    let sale = drill.open_sale(STOCK).await;
    // 2 buyers a second for 40 s: the units sell all through the outage.
    let crowd = drill.crowd(&sale, CrowdPlan::steady(80, 2.0));
    crowd.until_accepted(4, CROWD_PROGRESS).await;

    let failures_before = drill
        .metric(Service::Consumer, "seckill_consumer_batch_failures_total")
        .await;
    drill.stop_component(Component::Mariadb).await;
    let down_at = crowd.elapsed();
    let cpu_at_stop = drill.cpu_seconds(Service::Consumer);
    let stopped = Instant::now();
    // The fault itself lasts a fixed time; nothing to poll for.
    tokio::time::sleep(OUTAGE / 2).await;
    let gateway_ready = drill.readiness(Service::Gateway).await;
    let consumer_ready = drill.readiness(Service::Consumer).await;
    tokio::time::sleep(OUTAGE - OUTAGE / 2).await;
    let cpu_used = drill.cpu_seconds(Service::Consumer) - cpu_at_stop;
    let outage = stopped.elapsed();
    let failures = drill
        .metric(Service::Consumer, "seckill_consumer_batch_failures_total")
        .await
        - failures_before;
    drill.start_component(Component::Mariadb).await;
    let back = Instant::now();
    let up_at = crowd.elapsed();
    let outcome = crowd.finish().await;

    let sold_in_outage = outcome.accepted_within(down_at, up_at);
    assert!(
        sold_in_outage > 0,
        "the gateway keeps selling while MySQL is down: {outcome}"
    );
    assert!(
        outcome.server_errors().is_empty(),
        "no buyer is failed for MySQL's absence: {:?}",
        outcome.server_errors()
    );
    assert_eq!(
        gateway_ready, 200,
        "a gateway stays in its Service while MySQL is down: it sells without it"
    );
    assert_eq!(
        consumer_ready, 503,
        "a consumer leaves its Service while MySQL is down: it cannot write"
    );
    assert!(
        failures >= 1.0,
        "the consumer tried to write while MySQL was down (else the drill tested nothing)"
    );
    let bound = FAILED_ATTEMPTS_PER_ORDER * outcome.accepted().count() as f64;
    assert!(
        failures <= bound,
        "{failures} failed batches in {outage:?} for {} orders: the consumer retries without \
         backing off",
        outcome.accepted().count()
    );
    assert!(
        cpu_used <= IDLE_CPU_SHARE * outage.as_secs_f64(),
        "the consumer used {cpu_used:.2} s of CPU in a {outage:?} outage: it spins"
    );

    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(CATCH_UP)).await;
    assert_eq!(audit.orders, outcome.accepted().count(), "{audit}");
    eprintln!(
        "mysql outage: {outcome}; {sold_in_outage} sold during the outage; {failures} failed \
         batches and {cpu_used:.2} s CPU in it; caught up and audited {:?} after MariaDB \
         returned",
        back.elapsed()
    );
}
