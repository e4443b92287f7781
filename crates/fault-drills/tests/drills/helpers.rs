//! What the drills share beyond the harness: timings sized for a 2-core CI machine.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use fault_drills::{Drill, Service, eventually};
use reqwest::StatusCode;
use serde_json::Value;

/// Settling after a fault: check-backs come every 2 s, the consumer's first retry after
/// 10 s; a minute leaves room for a loaded machine without hiding a real loss for long.
pub const SETTLE: Duration = Duration::from_secs(60);

/// How long a crowd may take to reach a moment a drill waits for.
pub const CROWD_PROGRESS: Duration = Duration::from_secs(30);

/// SIGABRT, which a fail point's `return` action raises (see order-consumer-svc's faults).
const SIGABRT: i32 = 6;

/// True when the process ended by aborting: it crashed where a fail point was armed, not
/// somewhere else.
pub fn aborted(status: ExitStatus) -> bool {
    status.signal() == Some(SIGABRT)
}

/// config/local.toml's admin token, which the drills' services run with (local mode).
pub const ADMIN_TOKEN: &str = "dev-admin-token";

/// Asks the gateway to rebuild a product Redis lost (`POST /admin/v1/products/{id}/reload`)
/// until it answers 200; returns the answer's body. Meanwhile it may answer 409
/// ORDERS_IN_FLIGHT (queued orders are still being written) or 503 (its Redis connections
/// died with the wipe and are being replaced); any other answer fails the drill.
pub async fn reload_until_done(drill: &Drill, product: u64) -> Value {
    let url = format!(
        "{}/admin/v1/products/{product}/reload",
        drill.url(Service::Gateway)
    );
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("an HTTP client");
    eventually(SETTLE, "the reload to succeed", || {
        let request = client.post(&url).bearer_auth(ADMIN_TOKEN).send();
        async move {
            let response = request.await.ok()?;
            let status = response.status();
            let body: Value = response.json().await.ok()?;
            if status == StatusCode::OK {
                return Some(body);
            }
            assert!(
                matches!(
                    (status, body["error"]["code"].as_str()),
                    (StatusCode::CONFLICT, Some("ORDERS_IN_FLIGHT"))
                        | (StatusCode::SERVICE_UNAVAILABLE, Some("UNAVAILABLE"))
                ),
                "the reload can only wait for queued orders or for Redis: {status} {body}"
            );
            None
        }
    })
    .await
}

/// config/local.toml's payment webhook secret, which the drills' gateways verify with.
pub const WEBHOOK_SECRET: &str = "dev-webhook-secret-change-me";

/// The setting of how long a written order waits for its payment, in seconds.
pub const PAYMENT_WINDOW: &str = "SECKILL_ORDERS__PAYMENT_WINDOW_SECS";

/// The price the lifecycle drills sell at: a payment must bring exactly this per unit.
pub const PRICE_CENTS: u64 = 1999;

/// An HTTP client for the drill's own calls to the gateway (not a buyer of the crowd).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client")
}

/// Prices the sale's product at [`PRICE_CENTS`] in MySQL, which is where a payment's
/// amount is checked.
pub async fn price_sale(drill: &Drill, product: u64) {
    use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
    let mut conn = AsyncMysqlConnection::establish(drill.stack.db.url())
        .await
        .expect("the drill's database answers");
    let priced = diesel::sql_query("UPDATE products SET price_cents = ? WHERE id = ?")
        .bind::<diesel::sql_types::Unsigned<diesel::sql_types::BigInt>, _>(PRICE_CENTS)
        .bind::<diesel::sql_types::Unsigned<diesel::sql_types::BigInt>, _>(product)
        .execute(&mut conn)
        .await
        .expect("the product is priced");
    assert_eq!(priced, 1, "the sale's product is defined in MySQL");
}

/// Waits until MySQL holds `n` of the sale's orders in `status` (`confirmed`, `expired`…).
pub async fn until_orders(drill: &Drill, status: &str, n: i64, within: Duration) {
    let sql = format!("SELECT COUNT(*) AS n FROM orders WHERE status = '{status}'");
    eventually(within, &format!("{n} orders {status} in MySQL"), || async {
        (drill.count(&sql).await == n).then_some(())
    })
    .await;
}

/// How many of the sale's orders MySQL holds in `status`.
pub async fn orders_in(drill: &Drill, status: &str) -> i64 {
    drill
        .count(&format!(
            "SELECT COUNT(*) AS n FROM orders WHERE status = '{status}'"
        ))
        .await
}

/// The answer of the gateway to a drill's call: status and JSON body (null when none).
pub async fn answer(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The payment provider's signed callback for one unit of `order`, as it is sent in local
/// mode (`X-Signature` over the raw body).
pub async fn notify_payment(
    client: &reqwest::Client,
    drill: &Drill,
    payment_id: &str,
    order: &str,
) -> (StatusCode, Value) {
    let body = serde_json::to_vec(&serde_json::json!({
        "payment_id": payment_id,
        "order_token": order,
        "amount_cents": PRICE_CENTS,
        "paid_at": chrono::Utc::now(),
    }))
    .expect("a payment serialises");
    let signature = domain::WebhookKey::new(WEBHOOK_SECRET).sign(&body);
    let response = client
        .post(format!(
            "{}/api/v1/payments/notify",
            drill.url(Service::Gateway)
        ))
        .header("Content-Type", "application/json")
        .header("X-Signature", signature)
        .body(body)
        .send()
        .await
        .expect("the gateway answers the payment");
    answer(response).await
}

/// The buyer's cancel of their order.
pub async fn cancel(
    client: &reqwest::Client,
    drill: &Drill,
    user: u64,
    order: &str,
) -> (StatusCode, Value) {
    let response = client
        .post(format!(
            "{}/api/v1/orders/{order}/cancel",
            drill.url(Service::Gateway)
        ))
        .header("X-User-Id", user)
        .send()
        .await
        .expect("the gateway answers the cancel");
    answer(response).await
}

/// Waits until no order is confirmed with its `pay_by` still ahead, by MySQL's clock (the
/// one the expiry's conditional write reads).
pub async fn until_orders_due(drill: &Drill, within: Duration) {
    eventually(within, "every pay_by passed", || async {
        let ahead = drill
            .count(
                "SELECT COUNT(*) AS n FROM orders WHERE status = 'confirmed' AND pay_by > NOW(3)",
            )
            .await;
        (ahead == 0).then_some(())
    })
    .await;
}
