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
