//! Drill 10: buyers hang up in the middle of their purchase. Their requests reached the
//! gateway and its pre-deducts reached Redis, which is frozen (SIGSTOP) so that every
//! purchase is still waiting there; then each buyer's connection is reset (a client killed,
//! a proxy giving up), and Redis goes on. A reset connection ends actix-web's handler for it,
//! so a purchase that lived in the handler stopped between its pre-deduct and its message:
//! Redis still ran the script, and the unit stayed reserved with no message to carry it,
//! until reconcile. The purchase runs to its end instead, answered or not: once the sale
//! settles, without reconcile, each purchase of a buyer who hung up has its order or was
//! refused having reserved nothing, and nothing is left reserved.

use std::time::Duration;

use fault_drills::crowd::purchase_token;
use fault_drills::stack::Component;
use fault_drills::{CrowdPlan, Drill, Sale, Service, Settle, eventually, settle_and_audit};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::helpers::SETTLE;

const STOCK: i64 = 20;
const BUYERS: u64 = 8;
/// The buyer of the one purchase before the stall, apart from those who hang up.
const FIRST_BUYER: u64 = 100;
/// The gateway's `redis.timeout_ms`: well past the stall, so that the gateway is still
/// waiting for Redis when the buyers hang up, and Redis answers it afterwards.
const REDIS_TIMEOUT_MS: &str = "10000";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buyer_who_hangs_up_mid_purchase_leaves_no_unit_stranded() {
    let mut drill = Drill::begin("buyer_hangs_up").await;
    drill
        .start_with(
            Service::Gateway,
            &[("SECKILL_REDIS__TIMEOUT_MS", REDIS_TIMEOUT_MS)],
        )
        .await;
    drill.start(Service::Consumer).await;
    let sale = drill.open_sale(STOCK).await;
    let gateway = drill.url(Service::Gateway);
    // One purchase first, answered: Redis then holds the purchase's scripts, so a frozen
    // Redis is sent the script's call itself (EVALSHA), not a call it would refuse as an
    // unknown script once it goes on, leaving the client to send the script again.
    let first_buyer = CrowdPlan {
        first_user: FIRST_BUYER,
        ..CrowdPlan::rush(1, 1)
    };
    let first = drill.crowd(&sale, first_buyer).finish().await;
    assert_eq!(
        first.accepted().count(),
        1,
        "a purchase before the stall is accepted: {first}"
    );
    let mut tokens = Vec::new();
    for user in 1..=BUYERS {
        let token = purchase_token(&gateway, sale.product, user)
            .await
            .unwrap_or_else(|refused| panic!("a token is issued: {refused:?}"));
        tokens.push((user, token));
    }

    drill.freeze_component(Component::Redis).await;
    let mut hanging = Vec::new();
    for (user, token) in &tokens {
        hanging.push(send_purchase(&gateway, &sale, *user, token).await);
    }
    // Every purchase read and on its way to Redis (the gauge is sampled once a second).
    eventually(
        Duration::from_secs(10),
        "the gateway holds every purchase before its buyer hangs up",
        || async {
            let in_flight = drill
                .metric(Service::Gateway, "seckill_purchases_in_flight")
                .await;
            (in_flight >= BUYERS as f64).then_some(())
        },
    )
    .await;
    for connection in hanging {
        hang_up(connection);
    }
    // Let the gateway see the resets before Redis answers anything.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drill.thaw_component(Component::Redis).await;

    // None of them was answered (only the first buyer was): the audit holds the stores to
    // each other, and no flow may stay reserved without reconcile's help.
    let audit = settle_and_audit(&drill, &sale, &first, Settle::within(SETTLE)).await;
    // Each purchase ran to its end, heard by nobody: an order, or a refusal that reserved
    // nothing (a purchase that could not even get a connection to the frozen Redis before
    // its pool gave up was never sent, and is refused).
    let unheard = drill
        .metric(Service::Gateway, "seckill_purchases_unheard_total")
        .await;
    assert_eq!(
        unheard, BUYERS as f64,
        "every purchase runs to its end and counts as unheard, whoever hung up"
    );
    let unheard_accepted = drill
        .metric_where(
            Service::Gateway,
            "seckill_purchases_unheard_total",
            r#"outcome="accepted""#,
        )
        .await;
    assert!(
        unheard_accepted >= 1.0,
        "some pre-deduct reached the frozen Redis, or the drill proves nothing:\n{audit}"
    );
    assert_eq!(
        audit.orders as f64,
        1.0 + unheard_accepted,
        "an order for the buyer before the stall and for every unheard purchase accepted:\n{audit}"
    );
    eprintln!(
        "buyer hangs up: {BUYERS} purchases reset while Redis was frozen, {unheard_accepted} \
         of them accepted; settled {:?} after the thaw with {} orders",
        audit.settled_after, audit.orders
    );
}

/// Writes a whole purchase request on a connection of its own and leaves it unread.
async fn send_purchase(gateway: &str, sale: &Sale, user: u64, token: &str) -> TcpStream {
    let address = gateway.trim_start_matches("http://");
    let body = serde_json::json!({"token": token, "quantity": 1}).to_string();
    let request = format!(
        "POST /api/v1/products/{}/purchase HTTP/1.1\r\nHost: {address}\r\nX-User-Id: {user}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        sale.product,
        body.len()
    );
    let mut connection = TcpStream::connect(address)
        .await
        .expect("the gateway accepts");
    connection
        .write_all(request.as_bytes())
        .await
        .expect("the request is written");
    connection
}

/// Closes the connection with a reset (RST), not an orderly FIN: what a killed client or a
/// proxy that gives up leaves the gateway with.
fn hang_up(connection: TcpStream) {
    connection.set_zero_linger().expect("SO_LINGER can be set");
    drop(connection);
}
