//! The payment provider's callback signature: `X-Signature: sha256=<hex>`, the HMAC-SHA256
//! of the raw body with the shared webhook secret. Checked over the bytes as they arrived,
//! before anything is parsed, so a forged body changes nothing and costs no parsing.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The scheme prefix of the header's value.
const SCHEME: &str = "sha256=";

/// Verifies the provider's signatures with one secret.
#[derive(Clone)]
pub struct WebhookKey(Vec<u8>);

impl std::fmt::Debug for WebhookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookKey(..)")
    }
}

impl WebhookKey {
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        Self(secret.into())
    }

    /// The header value the provider sends for `body`.
    pub fn sign(&self, body: &[u8]) -> String {
        let tag = self.mac(body).finalize().into_bytes();
        let mut header = String::with_capacity(SCHEME.len() + tag.len() * 2);
        header.push_str(SCHEME);
        for byte in tag {
            header.push_str(&format!("{byte:02x}"));
        }
        header
    }

    /// Whether `header` (the `X-Signature` value) signs `body`. Compared in constant time
    /// (`Mac::verify_slice`): a timing difference would let a forger learn the tag byte by
    /// byte. Hex digits of either case are accepted.
    pub fn verifies(&self, body: &[u8], header: &str) -> bool {
        let Some(hex) = header.trim().strip_prefix(SCHEME) else {
            return false;
        };
        let Some(tag) = decode_hex(hex) else {
            return false;
        };
        self.mac(body).verify_slice(&tag).is_ok()
    }

    fn mac(&self, body: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(body);
        mac
    }
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = br#"{"payment_id":"p-1","order_token":"7-00","amount_cents":100}"#;

    #[test]
    fn a_body_verifies_with_its_own_signature_in_either_case() {
        let key = WebhookKey::new("secret");
        let header = key.sign(BODY);
        assert!(header.starts_with("sha256=") && header.len() == 7 + 64);
        assert!(key.verifies(BODY, &header));
        assert!(key.verifies(BODY, &header.to_uppercase().replace("SHA256=", "sha256=")));
    }

    #[test]
    fn a_changed_body_another_key_or_a_malformed_header_does_not_verify() {
        let key = WebhookKey::new("secret");
        let header = key.sign(BODY);
        assert!(!key.verifies(b"{}", &header));
        assert!(!WebhookKey::new("other").verifies(BODY, &header));
        for bad in [
            "",
            "sha256=",
            "sha256=zz",
            "md5=00",
            &header[..header.len() - 1],
        ] {
            assert!(!key.verifies(BODY, bad), "{bad:?} verified");
        }
    }
}
