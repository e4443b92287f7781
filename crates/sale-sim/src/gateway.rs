//! The gateway's HTTP API as the simulation uses it: one typed call per endpoint, each
//! answering either the success body or a [`Refusal`] that names the error code.

use std::time::Duration;

use reqwest::{Client, RequestBuilder};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// A request the gateway did not grant, reduced to what the report counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `None` when no answer came back at all (connection refused, reset, timed out).
    pub status: Option<u16>,
    /// The API's error code, or a code of ours when the answer carried none:
    /// `HTTP_<status>`, `TIMEOUT`, `NO_RESPONSE`, `BAD_RESPONSE`.
    pub code: String,
    pub message: String,
}

impl Refusal {
    /// A failure of the service rather than an answer of the sale: a 5xx, no answer, or a
    /// success whose body we could not read.
    pub fn is_failure(&self) -> bool {
        match self.status {
            None => true,
            Some(status) => status >= 500 || self.code == BAD_RESPONSE,
        }
    }
}

const BAD_RESPONSE: &str = "BAD_RESPONSE";

pub type Reply<T> = Result<T, Refusal>;

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    code: String,
    #[serde(default)]
    message: String,
}

#[derive(Debug, Deserialize)]
pub struct TokenIssued {
    pub token: String,
}

#[derive(Debug, Deserialize)]
pub struct Queued {
    pub order_token: String,
}

/// An order as its buyer sees it (`GET /api/v1/orders/{token}`, and the answers of the
/// cancel and of a payment callback).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct OrderStatus {
    pub status: String,
    #[serde(default)]
    pub quantity: Option<u32>,
    /// Until when a confirmed order waits for its payment (RFC 3339).
    #[serde(default)]
    pub pay_by: Option<String>,
}

/// `GET /admin/v1/products/{id}`. The lifecycle counts are absent from a gateway that does
/// not have them yet, and a sale without the after-sale phase never reads them.
#[derive(Debug, Clone, Deserialize)]
pub struct ProductState {
    pub redis_stock: Option<i64>,
    pub mysql_stock: Option<i64>,
    pub flows: u64,
    /// Order rows of any status.
    pub orders: i64,
    #[serde(default)]
    pub initial_stock: Option<i64>,
    /// Paid units (or orders: one unit each in a simulated sale, so the same number).
    #[serde(default)]
    pub paid: Option<i64>,
    /// Units of cancelled and expired orders given back.
    #[serde(default)]
    pub returned: Option<i64>,
    /// Payments that came for an order already closed.
    #[serde(default)]
    pub refunds_due: Option<i64>,
}

/// One shared client (one connection pool) and where the gateway is.
#[derive(Clone)]
pub struct Gateway {
    client: Client,
    base: String,
    /// Where `/admin` is: `base`, unless the gateway serves it on an ops port.
    admin_base: String,
    admin_token: String,
}

impl Gateway {
    /// Every connection opened stays in the pool (no cap on idle ones, reqwest's default), so a
    /// buyer reuses a warm one instead of paying a TCP handshake per request. A cap on idle
    /// connections would close the extra ones an open loop opens during a latency spike,
    /// only to open them again at the next: at 4,600 purchases/s a cap of 64 made some
    /// 1,600 connections per 10 s round, each a handshake and an accept in the gateway just
    /// when it was already behind.
    ///
    /// Idle ones are closed after `idle_close`, though, which must be under the gateway's
    /// keep-alive (`gateway.keep_alive_secs`): a request sent on a connection just as the
    /// server's keep-alive timer closes it is lost ("connection closed before message
    /// completed"), and in an open loop the connections left over from a spike sit idle that
    /// long.
    pub fn new(base: &str, admin_token: &str, idle_close: Duration) -> anyhow::Result<Self> {
        let client = Client::builder()
            .timeout(Duration::from_secs(10))
            .pool_idle_timeout(idle_close)
            // A proxy from the environment would sit between us and a local gateway.
            .no_proxy()
            .build()?;
        let base = base.trim_end_matches('/').to_owned();
        Ok(Self {
            client,
            admin_base: base.clone(),
            base,
            admin_token: admin_token.to_owned(),
        })
    }

    /// Sends the admin calls to `admin_base` (a gateway with `gateway.ops_listen` set
    /// serves `/admin` there, not on its public port); `None` leaves them on the base URL.
    pub fn with_admin_base(mut self, admin_base: Option<&str>) -> Self {
        if let Some(admin_base) = admin_base {
            self.admin_base = admin_base.trim_end_matches('/').to_owned();
        }
        self
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Puts the product on sale with `stock` units in all. A new product (sale-sim's default
    /// id is new every run) is simply defined; with `force`, one that already has a sale is
    /// restocked to `stock` initial units, what was sold staying sold.
    /// Without `price_cents` the body is what it was before prices existed, so a gateway
    /// without them still takes it.
    pub async fn put_product(
        &self,
        product: u64,
        stock: i64,
        per_user_limit: u32,
        price_cents: Option<u64>,
    ) -> Reply<()> {
        let mut body = json!({
            "name": format!("sale-sim {product}"),
            "stock": stock,
            "per_user_limit": per_user_limit,
            "force": true,
        });
        if let Some(price_cents) = price_cents {
            body["price_cents"] = json!(price_cents);
        }
        let request = self
            .client
            .put(format!("{}/admin/v1/products/{product}", self.admin_base))
            .bearer_auth(&self.admin_token)
            .json(&body);
        send::<serde_json::Value>(request).await.map(drop)
    }

    pub async fn product_state(&self, product: u64) -> Reply<ProductState> {
        let request = self
            .client
            .get(format!("{}/admin/v1/products/{product}", self.admin_base))
            .bearer_auth(&self.admin_token);
        send(request).await
    }

    pub async fn issue_token(&self, product: u64, user: u64) -> Reply<TokenIssued> {
        let request = self
            .client
            .post(format!("{}/api/v1/products/{product}/tokens", self.base))
            .header("X-User-Id", user);
        send(request).await
    }

    pub async fn purchase(&self, product: u64, user: u64, token: &str) -> Reply<Queued> {
        let request = self
            .client
            .post(format!("{}/api/v1/products/{product}/purchase", self.base))
            .header("X-User-Id", user)
            .json(&json!({"token": token, "quantity": 1}));
        send(request).await
    }

    pub async fn order_status(&self, user: u64, order_token: &str) -> Reply<OrderStatus> {
        let request = self
            .client
            .get(format!("{}/api/v1/orders/{order_token}", self.base))
            .header("X-User-Id", user);
        send(request).await
    }

    /// The order once its status changes, or as it is after `wait_secs` (a long-poll).
    pub async fn order_change(
        &self,
        user: u64,
        order_token: &str,
        wait_secs: u64,
    ) -> Reply<OrderStatus> {
        let request = self
            .client
            .get(format!("{}/api/v1/orders/{order_token}", self.base))
            .query(&[("wait_secs", wait_secs)])
            .header("X-User-Id", user)
            // The client's timeout is for quick answers; this one may take `wait_secs`.
            .timeout(Duration::from_secs(wait_secs) + LONG_POLL_SLACK);
        send(request).await
    }

    pub async fn cancel(&self, user: u64, order_token: &str) -> Reply<OrderStatus> {
        let request = self
            .client
            .post(format!("{}/api/v1/orders/{order_token}/cancel", self.base))
            .header("X-User-Id", user);
        send(request).await
    }

    /// A payment callback as the provider sends it: these exact bytes, this signature
    /// header. The answer is kept whole, so that a repeated callback can be compared.
    pub async fn notify_payment(&self, body: Vec<u8>, signature: &str) -> Reply<serde_json::Value> {
        let request = self
            .client
            .post(format!("{}/api/v1/payments/notify", self.base))
            .header("Content-Type", "application/json")
            .header("X-Signature", signature)
            .body(body);
        send(request).await
    }

    /// Opens the order's event stream; the caller reads it chunk by chunk, for at most
    /// `open_for`.
    pub async fn order_events(
        &self,
        user: u64,
        order_token: &str,
        open_for: Duration,
    ) -> Reply<reqwest::Response> {
        let response = self
            .client
            .get(format!("{}/api/v1/orders/{order_token}/events", self.base))
            .header("X-User-Id", user)
            .header("Accept", "text/event-stream")
            .timeout(open_for)
            .send()
            .await
            .map_err(no_answer)?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body = response.bytes().await.unwrap_or_default();
        Err(refused(status, &body))
    }
}

/// How much longer than its `wait_secs` a long-poll may take to be answered.
const LONG_POLL_SLACK: Duration = Duration::from_secs(5);

fn no_answer(error: reqwest::Error) -> Refusal {
    Refusal {
        status: None,
        code: if error.is_timeout() {
            "TIMEOUT"
        } else {
            "NO_RESPONSE"
        }
        .to_owned(),
        message: chain(&error),
    }
}

async fn send<T: DeserializeOwned>(request: RequestBuilder) -> Reply<T> {
    let response = request.send().await.map_err(no_answer)?;
    let status = response.status();
    let body = response.bytes().await.map_err(|error| Refusal {
        status: Some(status.as_u16()),
        code: if error.is_timeout() {
            "TIMEOUT"
        } else {
            "NO_RESPONSE"
        }
        .to_owned(),
        message: format!("the body did not arrive: {}", chain(&error)),
    })?;
    if status.is_success() {
        return serde_json::from_slice(&body).map_err(|error| Refusal {
            status: Some(status.as_u16()),
            code: BAD_RESPONSE.to_owned(),
            message: format!("unreadable {status} body: {error}"),
        });
    }
    Err(refused(status, &body))
}

/// A non-success answer: its error code, or `HTTP_<status>` when the body names none.
fn refused(status: reqwest::StatusCode, body: &[u8]) -> Refusal {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(ErrorBody { error }) => Refusal {
            status: Some(status.as_u16()),
            code: error.code,
            message: error.message,
        },
        Err(_) => Refusal {
            status: Some(status.as_u16()),
            code: format!("HTTP_{}", status.as_u16()),
            message: String::from_utf8_lossy(body).chars().take(200).collect(),
        },
    }
}

/// reqwest's top-level message hides the cause ("error sending request"); say it all.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(status: Option<u16>, code: &str) -> Refusal {
        Refusal {
            status,
            code: code.into(),
            message: String::new(),
        }
    }

    #[test]
    fn only_server_errors_and_silence_are_failures() {
        assert!(refusal(None, "TIMEOUT").is_failure());
        assert!(refusal(Some(503), "UNAVAILABLE").is_failure());
        assert!(refusal(Some(200), BAD_RESPONSE).is_failure());
        assert!(!refusal(Some(409), "SOLD_OUT").is_failure());
        assert!(!refusal(Some(429), "RATE_LIMITED").is_failure());
    }
}
