//! `redis.wait_replicas`: a purchase is answered only once the Redis replicas acknowledged
//! its reservation; one they did not acknowledge in time gives its unit back.

use reqwest::StatusCode;

use crate::helpers::{assert_error, spawn_app_with};

#[tokio::test]
async fn a_purchase_no_redis_replica_acknowledged_is_refused_and_takes_nothing() {
    // The local stack's Redis has no replica, so its WAIT can only time out.
    let app = spawn_app_with(&[
        ("SECKILL_REDIS__WAIT_REPLICAS", "1"),
        ("SECKILL_REDIS__WAIT_TIMEOUT_MS", "50"),
    ])
    .await;
    app.open_sale(1, 5, 1).await;

    assert_error(
        app.buy(7, 1).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "UNAVAILABLE",
    )
    .await;
    app.assert_nothing_taken(1, 5).await;
}
