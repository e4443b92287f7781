//! `gateway.ops_listen`: `/metrics` and `/admin` on a port of their own, so that the public
//! one can be opened to everyone and the ops one to Prometheus and the operators alone.

use gateway_svc::routes::{Audience, routes};
use gateway_svc::{Application, Settings};
use reqwest::{Client, Method, StatusCode};
use serde_json::json;
use test_support::service::InProcessService;
use test_support::stack::TestStack;
use tokio::sync::oneshot;

use crate::helpers::{ADMIN, concrete};

/// A gateway with an ops port; (the gateway, its public URL, its ops URL).
async fn spawn_with_ops_port(stack: &TestStack) -> (InProcessService, String, String) {
    let settings: Settings = stack.settings(&[("SECKILL_GATEWAY__OPS_LISTEN", "127.0.0.1:0")]);
    let (ops_port_tx, ops_port_rx) = oneshot::channel();
    let gateway = InProcessService::start("gateway", move |shutdown, port| async move {
        let app = Application::build(settings).await?;
        let _ = ops_port_tx.send(app.ops_port().expect("an ops port, ops_listen being set"));
        let _ = port.send(app.port());
        app.run_until_stopped(shutdown).await
    })
    .await;
    let public = gateway.url();
    let ops = format!(
        "http://127.0.0.1:{}",
        ops_port_rx.await.expect("the ops port")
    );
    (gateway, public, ops)
}

/// Whether the server at `base` has a route for `method path` (a 404 naming a route is the
/// app's fallback: no such route there).
async fn routed(client: &Client, base: &str, method: &str, path: &str) -> bool {
    let method = Method::from_bytes(method.as_bytes()).expect("an HTTP method");
    let response = client
        .request(method, format!("{base}{}", concrete(path)))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("the gateway answers");
    let status = response.status();
    let text = response.text().await.unwrap();
    !(status == StatusCode::NOT_FOUND && text.contains("route not found"))
}

#[tokio::test]
async fn with_an_ops_port_each_route_is_served_on_its_audiences_port_and_the_probes_on_both() {
    let stack = TestStack::new().await;
    let (_gateway, public, ops) = spawn_with_ops_port(&stack).await;
    let client = Client::new();
    for (method, path) in routes(Audience::Everyone) {
        let method = method.as_str();
        let for_operators = path.starts_with("/admin/") || path == "/metrics";
        let probe = path == "/healthz" || path == "/readyz";
        assert_eq!(
            routed(&client, &public, method, path).await,
            !for_operators,
            "{method} {path} on the public port"
        );
        assert_eq!(
            routed(&client, &ops, method, path).await,
            for_operators || probe,
            "{method} {path} on the ops port"
        );
    }
}

#[tokio::test]
async fn a_product_defined_on_the_ops_port_is_bought_on_the_public_port() {
    let stack = TestStack::new().await;
    let (_gateway, public, ops) = spawn_with_ops_port(&stack).await;
    let client = Client::new();
    let defined = client
        .put(format!("{ops}/admin/v1/products/7"))
        .bearer_auth(ADMIN)
        .json(&json!({"name": "phone", "stock": 1, "per_user_limit": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(defined.status(), StatusCode::OK);

    let issued = client
        .post(format!("{public}/api/v1/products/7/tokens"))
        .header("X-User-Id", "42")
        .send()
        .await
        .unwrap();
    assert_eq!(issued.status(), StatusCode::CREATED);
    let token = issued.json::<serde_json::Value>().await.unwrap()["token"]
        .as_str()
        .expect("a token")
        .to_owned();
    let bought = client
        .post(format!("{public}/api/v1/products/7/purchase"))
        .header("X-User-Id", "42")
        .json(&json!({"token": token, "quantity": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(bought.status(), StatusCode::ACCEPTED);
}

#[tokio::test]
async fn the_ops_port_serves_the_prometheus_page() {
    let stack = TestStack::new().await;
    let (_gateway, _public, ops) = spawn_with_ops_port(&stack).await;
    let metrics = Client::new()
        .get(format!("{ops}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    assert!(
        metrics
            .text()
            .await
            .unwrap()
            .contains("seckill_purchases_total"),
        "the gateway's series are on the ops port"
    );
}
