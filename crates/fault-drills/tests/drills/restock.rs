//! An operator restocks a sale while it sells (`PUT /admin/v1/products/{id}` with
//! `"force": true`), several times, growing and shrinking it and changing its per-user
//! limit. Each restock must be one step against the live sale: units reserved a moment
//! before it stay sold and are counted once, in Redis and in MySQL alike, so that once the
//! crowd is done the full audit balances against the last initial stock.

use std::time::Duration;

use fault_drills::{CrowdPlan, Drill, Sale, Service, Settle, settle_and_audit};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{ADMIN_TOKEN, CROWD_PROGRESS, SETTLE};

const FIRST_STOCK: i64 = 40;
/// Purchases accepted between two restocks: each restock lands among purchases.
const BETWEEN_RESTOCKS: usize = 15;

/// What each restock asks for, from the sale's initial stock at that moment: more units
/// most times, fewer now and then (fewer than are sold is refused and changes nothing).
fn next_initial(step: usize, initial: i64) -> i64 {
    if step % 3 == 2 {
        initial - 10
    } else {
        initial + 50
    }
}

/// A forced PUT of the drill's product; the answer's status and body.
async fn restock(
    drill: &Drill,
    sale: &Sale,
    initial: i64,
    per_user_limit: u32,
) -> (StatusCode, Value) {
    let response = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client")
        .put(format!(
            "{}/admin/v1/products/{}",
            drill.url(Service::Gateway),
            sale.product.get()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({
            "name": "phone",
            "stock": initial,
            "per_user_limit": per_user_limit,
            "force": true,
        }))
        .send()
        .await
        .expect("the gateway answers the restock");
    let status = response.status();
    (status, response.json().await.expect("a JSON body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forced_restocks_in_the_middle_of_a_sale_keep_both_stores_balanced() {
    let mut drill = Drill::begin("restock_mid_sale").await;
    drill.start(Service::Gateway).await;
    drill.start(Service::Consumer).await;
    let sale = drill.open_sale(FIRST_STOCK).await;
    // 100 buyers a second for 12 s: every restock has purchases reserving around it.
    let crowd = drill.crowd(
        &sale,
        CrowdPlan {
            concurrency: 32,
            ..CrowdPlan::steady(1200, 100.0)
        },
    );

    let mut initial = FIRST_STOCK;
    let (mut restocked, mut refused) = (0, 0);
    for step in 0..8 {
        crowd
            .until_accepted(BETWEEN_RESTOCKS * (step + 1), CROWD_PROGRESS)
            .await;
        let per_user_limit = if step % 2 == 0 { 2 } else { 1 };
        let (status, body) =
            restock(&drill, &sale, next_initial(step, initial), per_user_limit).await;
        match status {
            StatusCode::OK => {
                initial = body["initial_stock"].as_i64().expect("the initial stock");
                restocked += 1;
            }
            StatusCode::CONFLICT => {
                assert_eq!(body["error"]["code"], "STOCK_BELOW_SOLD", "{body}");
                refused += 1;
            }
            other => panic!("a restock is answered 200 or 409, not {other}: {body}"),
        }
    }
    let outcome = crowd.finish().await;
    assert!(
        restocked >= 5,
        "{restocked} restocks went through, {refused} refused"
    );

    let final_sale = Sale {
        stock: initial,
        ..sale
    };
    let audit = settle_and_audit(&drill, &final_sale, &outcome, Settle::within(SETTLE)).await;
    assert_eq!(audit.orders, outcome.accepted().count(), "{audit}");
    eprintln!(
        "restock mid-sale: {outcome}; {restocked} restocks, {refused} refused, initial stock \
         {initial}; settled in {:?}",
        audit.settled_after
    );
}
