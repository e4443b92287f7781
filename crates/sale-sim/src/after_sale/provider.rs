//! The simulated payment provider: the callback it sends for a payment, signed as the
//! gateway expects, and the forgeries a stranger might try.

use chrono::{DateTime, SecondsFormat, Utc};
use domain::WebhookKey;
use serde_json::json;

/// The key a forger signs with: anything but the shared secret.
const FORGER_SECRET: &str = "not-the-webhook-secret";

/// One callback as it goes over the wire: the body's exact bytes and its `X-Signature`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callback {
    pub body: Vec<u8>,
    pub signature: String,
}

/// Signs callbacks with the webhook secret shared with the gateway.
#[derive(Debug, Clone)]
pub struct Provider {
    key: WebhookKey,
}

impl Provider {
    pub fn new(secret: &str) -> Self {
        Self {
            key: WebhookKey::new(secret),
        }
    }

    /// The callback for `payment_id`, paying `amount_cents` for the order at `paid_at`.
    pub fn payment(
        &self,
        payment_id: &str,
        order_token: &str,
        amount_cents: u64,
        paid_at: DateTime<Utc>,
    ) -> Callback {
        let body = notice(payment_id, order_token, amount_cents, paid_at);
        Callback {
            signature: self.key.sign(&body),
            body,
        }
    }

    /// A callback the gateway must refuse (401) and act on in no way. Two kinds in turn:
    /// the genuine body signed with another key, and a genuine signature over a body whose
    /// amount was changed after signing.
    pub fn forgery(&self, genuine: &Callback, nth: usize) -> Callback {
        if nth.is_multiple_of(2) {
            return Callback {
                body: genuine.body.clone(),
                signature: WebhookKey::new(FORGER_SECRET).sign(&genuine.body),
            };
        }
        let mut tampered: serde_json::Value =
            serde_json::from_slice(&genuine.body).expect("a callback body is JSON");
        tampered["amount_cents"] = json!(1);
        Callback {
            body: serde_json::to_vec(&tampered).expect("JSON serialises"),
            signature: genuine.signature.clone(),
        }
    }
}

fn notice(
    payment_id: &str,
    order_token: &str,
    amount_cents: u64,
    paid_at: DateTime<Utc>,
) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "payment_id": payment_id,
        "order_token": order_token,
        "amount_cents": amount_cents,
        "paid_at": paid_at.to_rfc3339_opts(SecondsFormat::Millis, true),
    }))
    .expect("JSON serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "dev-webhook-secret-change-me";
    const TOKEN: &str = "7-0123456789abcdef0123456789abcdef";

    fn paid_at() -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_767_225_600_123).unwrap()
    }

    #[test]
    fn a_payment_is_signed_over_its_exact_body_with_the_shared_secret() {
        let callback = Provider::new(SECRET).payment("pay-1", TOKEN, 1999, paid_at());
        assert!(WebhookKey::new(SECRET).verifies(&callback.body, &callback.signature));
        let hex = callback.signature.strip_prefix("sha256=").unwrap();
        assert_eq!(hex.len(), 64);
        assert!(
            hex.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
    }

    #[test]
    fn a_payment_body_carries_what_the_gateway_reads() {
        let callback = Provider::new(SECRET).payment("pay-1", TOKEN, 1999, paid_at());
        let body: serde_json::Value = serde_json::from_slice(&callback.body).unwrap();
        assert_eq!(
            body,
            json!({
                "payment_id": "pay-1",
                "order_token": TOKEN,
                "amount_cents": 1999,
                "paid_at": "2026-01-01T00:00:00.123Z",
            })
        );
    }

    #[test]
    fn the_same_payment_twice_is_the_same_bytes() {
        let provider = Provider::new(SECRET);
        assert_eq!(
            provider.payment("pay-1", TOKEN, 1999, paid_at()),
            provider.payment("pay-1", TOKEN, 1999, paid_at())
        );
    }

    #[test]
    fn neither_kind_of_forgery_verifies() {
        let provider = Provider::new(SECRET);
        let genuine = provider.payment("pay-1", TOKEN, 1999, paid_at());
        let key = WebhookKey::new(SECRET);
        for nth in 0..2 {
            let forged = provider.forgery(&genuine, nth);
            assert_ne!(forged, genuine);
            assert!(
                !key.verifies(&forged.body, &forged.signature),
                "forgery {nth}"
            );
        }
        let tampered: serde_json::Value =
            serde_json::from_slice(&provider.forgery(&genuine, 1).body).unwrap();
        assert_eq!(tampered["amount_cents"], 1);
    }
}
