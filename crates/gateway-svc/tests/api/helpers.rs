use std::time::{Duration, Instant};

use gateway_svc::Application;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};
use test_support::service::InProcessService;
use test_support::stack::TestStack;

pub const ADMIN: &str = "dev-admin-token";
/// The payment provider's key of local runs (config/local.toml).
pub const WEBHOOK_SECRET: &str = "dev-webhook-secret-change-me";

/// `path` with a value for each path parameter the gateway has, so that it can be requested.
pub fn concrete(path: &str) -> String {
    path.replace("{product_id}", "1")
        .replace("{order_token}", "1-0123456789abcdef0123456789abcdef")
}

pub struct TestApp {
    pub address: String,
    pub client: reqwest::Client,
    pub stack: TestStack,
    // Dropped first: services stop before their stack is torn down.
    pub consumer: Option<InProcessService>,
    pub gateway: Option<InProcessService>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.gateway.take();
        self.consumer.take();
    }
}

/// A gateway on its own stack; `extra` overrides settings (`SECKILL_SECTION__KEY`).
pub async fn spawn_app_with(extra: &[(&str, &str)]) -> TestApp {
    spawn_app_on(TestStack::new().await, extra).await
}

/// [`spawn_app_with`] on a stack the test made, for settings that name its pieces.
pub async fn spawn_app_on(stack: TestStack, extra: &[(&str, &str)]) -> TestApp {
    let settings = stack.settings(extra);
    let gateway = InProcessService::start("gateway", move |shutdown, port| async move {
        let app = Application::build(settings).await?;
        let _ = port.send(app.port());
        app.run_until_stopped(shutdown).await
    })
    .await;
    TestApp {
        address: gateway.url(),
        client: reqwest::Client::new(),
        stack,
        consumer: None,
        gateway: Some(gateway),
    }
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(&[]).await
}

/// A gateway and an order consumer on one stack: the whole purchase path.
pub async fn spawn_app_with_consumer() -> TestApp {
    spawn_app_with_consumer_and(&[]).await
}

/// [`spawn_app_with_consumer`], with `extra` settings for the gateway.
pub async fn spawn_app_with_consumer_and(extra: &[(&str, &str)]) -> TestApp {
    let mut app = spawn_app_with(extra).await;
    app.start_consumer().await;
    app
}

impl TestApp {
    /// Starts an order consumer on the app's stack (again, after a test stopped it).
    pub async fn start_consumer(&mut self) {
        self.start_consumer_with(&[]).await;
    }

    /// [`TestApp::start_consumer`], with `extra` settings for the consumer.
    pub async fn start_consumer_with(&mut self, extra: &[(&str, &str)]) {
        let settings = self.stack.settings(extra);
        self.consumer = Some(
            InProcessService::start("consumer", move |shutdown, port| async move {
                let consumer = order_consumer_svc::Application::build(settings).await?;
                let _ = port.send(consumer.port());
                consumer.run_until_stopped(shutdown).await
            })
            .await,
        );
    }

    pub async fn put_product(&self, product: u64, body: Value) -> Response {
        self.client
            .put(format!("{}/admin/v1/products/{product}", self.address))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
            .await
            .expect("the gateway answers")
    }

    /// A product open for sale now, with this stock and per-user limit.
    pub async fn open_sale(&self, product: u64, stock: i64, per_user_limit: u32) {
        let response = self
            .put_product(
                product,
                json!({"name": "phone", "stock": stock, "per_user_limit": per_user_limit}),
            )
            .await;
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{:?}",
            response.text().await
        );
    }

    pub async fn request_token(&self, user: u64, product: u64) -> Response {
        self.client
            .post(format!("{}/api/v1/products/{product}/tokens", self.address))
            .header("X-User-Id", user.to_string())
            .send()
            .await
            .expect("the gateway answers")
    }

    pub async fn token(&self, user: u64, product: u64) -> String {
        let response = self.request_token(user, product).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        body(response).await["token"]
            .as_str()
            .expect("a token")
            .to_owned()
    }

    pub async fn purchase(&self, user: u64, product: u64, token: &str, quantity: u32) -> Response {
        self.purchase_raw(
            user,
            &product.to_string(),
            json!({"token": token, "quantity": quantity}),
        )
        .await
    }

    pub async fn purchase_raw(&self, user: u64, product: &str, body: Value) -> Response {
        self.client
            .post(format!(
                "{}/api/v1/products/{product}/purchase",
                self.address
            ))
            .header("X-User-Id", user.to_string())
            .json(&body)
            .send()
            .await
            .expect("the gateway answers")
    }

    /// Token and purchase in one go; returns the purchase's response.
    pub async fn buy(&self, user: u64, product: u64) -> Response {
        let token = self.token(user, product).await;
        self.purchase(user, product, &token, 1).await
    }

    pub async fn order_status(&self, user: u64, order_token: &str) -> Response {
        self.client
            .get(format!("{}/api/v1/orders/{order_token}", self.address))
            .header("X-User-Id", user.to_string())
            .send()
            .await
            .expect("the gateway answers")
    }

    /// A purchase that must be queued; returns its order token.
    pub async fn buy_order(&self, user: u64, product: u64) -> String {
        let response = self.buy(user, product).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        body(response).await["order_token"]
            .as_str()
            .expect("an order token")
            .to_owned()
    }

    pub async fn cancel(&self, user: u64, order_token: &str) -> Response {
        self.client
            .post(format!(
                "{}/api/v1/orders/{order_token}/cancel",
                self.address
            ))
            .header("X-User-Id", user.to_string())
            .send()
            .await
            .expect("the gateway answers")
    }

    /// The payment provider's callback, signed with `secret`.
    pub async fn notify_payment_signed(&self, body: &Value, secret: &str) -> Response {
        let raw = serde_json::to_vec(body).unwrap();
        let signature = domain::WebhookKey::new(secret).sign(&raw);
        self.client
            .post(format!("{}/api/v1/payments/notify", self.address))
            .header("Content-Type", "application/json")
            .header("X-Signature", signature)
            .body(raw)
            .send()
            .await
            .expect("the gateway answers")
    }

    /// The callback as the provider of a local run signs it.
    pub async fn notify_payment(&self, body: &Value) -> Response {
        self.notify_payment_signed(body, WEBHOOK_SECRET).await
    }

    pub async fn admin_view(&self, product: u64) -> Value {
        let response = self
            .client
            .get(format!("{}/admin/v1/products/{product}", self.address))
            .bearer_auth(ADMIN)
            .send()
            .await
            .expect("the gateway answers");
        assert_eq!(response.status(), StatusCode::OK);
        body(response).await
    }

    /// The product's Redis stock is `stock` and no unit is reserved: what a refused
    /// request must leave behind.
    pub async fn assert_nothing_taken(&self, product: u64, stock: i64) {
        let view = self.admin_view(product).await;
        assert_eq!(view["redis_stock"], stock, "{view}");
        assert_eq!(view["flows"], 0, "{view}");
    }

    /// Polls the order until it is confirmed, or panics after `timeout`.
    pub async fn wait_confirmed(&self, user: u64, order_token: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let status = body(self.order_status(user, order_token).await).await;
            if status["status"] == "confirmed" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not confirmed in {timeout:?}: {status}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls the product's admin view until it holds `flows` flow records (reserved
    /// units), or panics after `timeout`.
    pub async fn wait_flows(&self, product: u64, flows: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let view = self.admin_view(product).await;
            if view["flows"] == flows {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not {flows} flows after {timeout:?}: {view}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub async fn body(response: Response) -> Value {
    response.json().await.expect("a JSON body")
}

/// Asserts the status and the API error code of a response.
pub async fn assert_error(response: Response, status: StatusCode, code: &str) {
    assert_eq!(response.status(), status);
    let json = body(response).await;
    assert_eq!(json["error"]["code"], code, "{json}");
    assert!(json["error"]["message"].is_string(), "{json}");
}
