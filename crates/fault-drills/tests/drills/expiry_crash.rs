//! The process ending unpaid orders dies between the two stores: the consumer's expirer
//! has expired an order in MySQL (its units back in the MySQL stock) and is killed before
//! Redis is told. MySQL holds the truth; the deadline the dead process never acknowledged
//! comes again to the restarted consumer, which finds the order already expired and still
//! gives its units back in Redis — once, however often the deadline comes.
//!
//! `lifecycle::after_close` sits in `order_lifecycle::close` between the MySQL write and
//! the Redis return; `return` there aborts the process as a SIGKILL would.

use std::time::Duration;

use domain::OrderStatus;
use fault_drills::audit::audit_once;
use fault_drills::{CrowdPlan, Drill, Service, Settle, settle_and_audit};

use crate::helpers::{CROWD_PROGRESS, PAYMENT_WINDOW, SETTLE, aborted, orders_in};

const STOCK: i64 = 30;
/// Short, so that the first deadline comes due moments after the sale.
const WINDOW_SECS: &str = "3";
/// Up to the crash: the sale, its writing, and the first deadline coming due.
const UNTIL_CRASH: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expirer_killed_between_mysql_and_redis_returns_the_units_once_restarted() {
    let mut drill = Drill::begin("expiry_crash").await;
    drill.set_env(PAYMENT_WINDOW, WINDOW_SECS);
    drill.start(Service::Gateway).await;
    drill
        .spawn_with(
            Service::Consumer,
            &[("FAILPOINTS", "lifecycle::after_close=1*return")],
        )
        .await;
    let sale = drill.open_sale(STOCK).await;
    let outcome = drill
        .crowd(&sale, CrowdPlan::rush(STOCK as u32, 8))
        .finish()
        .await;
    assert_eq!(
        outcome.accepted().count(),
        STOCK as usize,
        "every unit is sold: {outcome}"
    );

    let status = drill.until_exit(Service::Consumer, UNTIL_CRASH).await;
    assert!(
        aborted(status),
        "the consumer should have crashed at lifecycle::after_close, but ended with {status}"
    );
    drill.until_mysql_idle(Duration::from_secs(10)).await;
    let at_crash = audit_once(&drill, &sale, &outcome).await;
    let redis_stock = at_crash.redis_stock.expect("Redis has the sale");
    let expired_not_returned = (sale.stock - redis_stock) - at_crash.held_units;
    assert!(
        at_crash.count(OrderStatus::Expired) >= 1 && expired_not_returned >= 1,
        "the crash left orders expired in MySQL whose units Redis still holds:\n{at_crash}"
    );

    drill.start(Service::Consumer).await;
    crate::helpers::until_orders(&drill, "expired", STOCK, CROWD_PROGRESS).await;
    let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(SETTLE)).await;

    assert_eq!(audit.count(OrderStatus::Expired), STOCK as usize, "{audit}");
    assert_eq!(
        audit.redis_stock,
        Some(STOCK),
        "every unit is back on sale: {audit}"
    );
    let returned = drill
        .metric(Service::Consumer, "seckill_units_returned_total")
        .await;
    assert_eq!(
        returned as i64,
        STOCK - redis_stock,
        "the restarted consumer returned in Redis exactly the units not returned before the \
         crash, each once"
    );
    assert_eq!(orders_in(&drill, "confirmed").await, 0);
    eprintln!(
        "expiry crash: {} orders expired before the crash, {expired_not_returned} of them \
         not returned in Redis; {returned} returned after the restart; settled in {:?}; \
         drill took {:?}",
        at_crash.count(OrderStatus::Expired),
        audit.settled_after,
        drill.elapsed()
    );
}
