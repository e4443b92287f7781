//! The one-time purchase token: `v2.<key id>.<payload>.<signature>`.
//!
//! The payload (URL-safe base64) is `<order token>:<user id>:<expires at, unix ms>:<sale>`;
//! the signature is HMAC-SHA256 over everything before the last dot, so the version and key
//! id are signed too. Verifying costs a hash and needs no Redis round trip, which is why
//! the gateway can check every request of the crowd before it spends anything on it.
//!
//! `sale` is the generation of the product's sale the token was issued in (Redis meta's
//! `sale`, new on every fresh load): `pre_deduct.lua` refuses a token of an earlier sale,
//! so a new sale of the same product does not honour the tokens of the last one.
//!
//! Tokens of version 1 (no sale) are malformed to this code and refused as an invalid
//! token: one held across the upgrade is simply asked for again. They lived `tokens.ttl_secs`.
//!
//! Keys rotate by id: tokens are signed with the current key, and every key still in the
//! set verifies — keep an old key until the last token it signed has expired.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::ids::{OrderToken, ProductId, UserId};

const VERSION: &str = "v2";
/// Longest token we even look at; anything longer is malformed by definition.
const MAX_TOKEN_LEN: usize = 256;

type HmacSha256 = Hmac<Sha256>;

/// What a valid token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurchaseClaims {
    pub order_token: OrderToken,
    pub user_id: UserId,
    pub expires_at_ms: i64,
    /// The generation of the product's sale it was issued in; 0 for a product loaded
    /// before sales had generations.
    pub sale: u64,
}

impl PurchaseClaims {
    pub fn product_id(&self) -> ProductId {
        self.order_token.product_id()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is malformed")]
    Malformed,
    #[error("the token was signed with an unknown key")]
    UnknownKey,
    #[error("the token's signature does not match")]
    BadSignature,
    #[error("the token has expired")]
    Expired,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignerError {
    #[error("the current token key `{0}` is not among the configured keys")]
    MissingCurrentKey(String),
    #[error("token key `{0}` is shorter than 16 bytes")]
    WeakKey(String),
    #[error("token key id `{0}` must be 1-16 characters of [A-Za-z0-9_-]")]
    BadKeyId(String),
}

/// Issues and verifies purchase tokens with a set of HMAC keys.
#[derive(Clone)]
pub struct TokenSigner {
    current_key_id: String,
    keys: HashMap<String, Vec<u8>>,
}

impl std::fmt::Debug for TokenSigner {
    // Key material never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSigner")
            .field("current_key_id", &self.current_key_id)
            .field("key_ids", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl TokenSigner {
    pub fn new(
        current_key_id: impl Into<String>,
        keys: HashMap<String, Vec<u8>>,
    ) -> Result<Self, SignerError> {
        let current_key_id = current_key_id.into();
        for (id, key) in &keys {
            let id_ok = (1..=16).contains(&id.len())
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !id_ok {
                return Err(SignerError::BadKeyId(id.clone()));
            }
            if key.len() < 16 {
                return Err(SignerError::WeakKey(id.clone()));
            }
        }
        if !keys.contains_key(&current_key_id) {
            return Err(SignerError::MissingCurrentKey(current_key_id));
        }
        Ok(Self {
            current_key_id,
            keys,
        })
    }

    /// Signs a token for this buyer and order with the current key.
    pub fn issue(&self, claims: &PurchaseClaims) -> String {
        let payload = format!(
            "{}:{}:{}:{}",
            claims.order_token, claims.user_id, claims.expires_at_ms, claims.sale
        );
        let signed = format!(
            "{VERSION}.{}.{}",
            self.current_key_id,
            URL_SAFE_NO_PAD.encode(payload)
        );
        let signature = self.mac(&self.current_key_id, signed.as_bytes());
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    /// Checks the signature (in constant time) and the expiry; the caller checks that the
    /// buyer and product match the request.
    pub fn verify(&self, token: &str, now_ms: i64) -> Result<PurchaseClaims, TokenError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(TokenError::Malformed);
        }
        let (signed, signature) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
        let mut parts = signed.split('.');
        let (Some(VERSION), Some(key_id), Some(payload), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let key = self.keys.get(key_id).ok_or(TokenError::UnknownKey)?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TokenError::Malformed)?;
        let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
        mac.update(signed.as_bytes());
        // verify_slice compares in constant time.
        mac.verify_slice(&signature)
            .map_err(|_| TokenError::BadSignature)?;

        let claims = Self::parse_payload(payload).ok_or(TokenError::Malformed)?;
        if now_ms >= claims.expires_at_ms {
            return Err(TokenError::Expired);
        }
        Ok(claims)
    }

    fn parse_payload(payload: &str) -> Option<PurchaseClaims> {
        let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
        let text = std::str::from_utf8(&bytes).ok()?;
        let mut fields = text.split(':');
        let claims = PurchaseClaims {
            order_token: fields.next()?.parse().ok()?,
            user_id: fields.next()?.parse().ok()?,
            expires_at_ms: fields.next()?.parse().ok()?,
            sale: fields.next()?.parse().ok()?,
        };
        fields.next().is_none().then_some(claims)
    }

    fn mac(&self, key_id: &str, data: &[u8]) -> Vec<u8> {
        let mut mac =
            HmacSha256::new_from_slice(&self.keys[key_id]).expect("HMAC takes keys of any length");
        mac.update(data);
        mac.finalize().into_bytes().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn signer(current: &str, keys: &[(&str, &str)]) -> TokenSigner {
        let keys = keys
            .iter()
            .map(|(id, key)| (id.to_string(), key.as_bytes().to_vec()))
            .collect();
        TokenSigner::new(current, keys).unwrap()
    }

    fn claims(expires_at_ms: i64) -> PurchaseClaims {
        PurchaseClaims {
            order_token: OrderToken::new(ProductId(3), 99),
            user_id: UserId(12),
            expires_at_ms,
            sale: 1_764_000_000_000,
        }
    }

    #[test]
    fn a_token_verifies_until_it_expires() {
        let signer = signer("k1", &[("k1", "0123456789abcdef")]);
        let token = signer.issue(&claims(1_000));
        assert_eq!(signer.verify(&token, 999), Ok(claims(1_000)));
        assert_eq!(signer.verify(&token, 1_000), Err(TokenError::Expired));
    }

    #[test]
    fn a_token_signed_with_another_key_is_forged() {
        let ours = signer("k1", &[("k1", "0123456789abcdef")]);
        let theirs = signer("k1", &[("k1", "fedcba9876543210")]);
        let token = theirs.issue(&claims(1_000));
        assert_eq!(ours.verify(&token, 0), Err(TokenError::BadSignature));
    }

    #[test]
    fn changing_any_claim_breaks_the_signature() {
        let signer = signer("k1", &[("k1", "0123456789abcdef")]);
        let token = signer.issue(&claims(1_000));
        let parts: Vec<&str> = token.split('.').collect();
        for other_claims in [
            format!(
                "{}:13:1000:1764000000000",
                OrderToken::new(ProductId(3), 99)
            ),
            format!(
                "{}:12:1000:1764000000001",
                OrderToken::new(ProductId(3), 99)
            ),
        ] {
            let other_payload = URL_SAFE_NO_PAD.encode(other_claims);
            let tampered = format!("{}.{}.{}.{}", parts[0], parts[1], other_payload, parts[3]);
            assert_eq!(signer.verify(&tampered, 0), Err(TokenError::BadSignature));
        }
    }

    #[test]
    fn a_token_carries_the_sale_it_was_issued_in() {
        let signer = signer("k1", &[("k1", "0123456789abcdef")]);
        let issued = PurchaseClaims {
            sale: 7,
            ..claims(1_000)
        };
        let token = signer.issue(&issued);
        assert!(token.starts_with("v2.k1."));
        assert_eq!(signer.verify(&token, 0).unwrap().sale, 7);
    }

    #[test]
    fn a_version_1_token_without_a_sale_is_malformed_even_when_well_signed() {
        // Exactly what the last version issued: three fields, signed with a key we hold.
        let signed = format!(
            "v1.k1.{}",
            URL_SAFE_NO_PAD.encode(format!("{}:12:1000", OrderToken::new(ProductId(3), 99)))
        );
        let mut mac = HmacSha256::new_from_slice(b"0123456789abcdef").unwrap();
        mac.update(signed.as_bytes());
        let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        let signer = signer("k1", &[("k1", "0123456789abcdef")]);
        assert_eq!(
            signer.verify(&format!("{signed}.{signature}"), 0),
            Err(TokenError::Malformed)
        );
    }

    #[test]
    fn old_keys_verify_after_rotation_and_unknown_keys_do_not() {
        let before = signer("k1", &[("k1", "0123456789abcdef")]);
        let after = signer(
            "k2",
            &[("k1", "0123456789abcdef"), ("k2", "another-key-of-16")],
        );
        let old_token = before.issue(&claims(1_000));
        assert_eq!(after.verify(&old_token, 0), Ok(claims(1_000)));
        assert!(after.issue(&claims(1_000)).starts_with("v2.k2."));

        let retired = signer("k2", &[("k2", "another-key-of-16")]);
        assert_eq!(retired.verify(&old_token, 0), Err(TokenError::UnknownKey));
    }

    #[test]
    fn weak_keys_and_a_missing_current_key_are_configuration_errors() {
        let weak = [("k1".to_string(), b"short".to_vec())].into();
        assert!(matches!(
            TokenSigner::new("k1", weak),
            Err(SignerError::WeakKey(_))
        ));
        let keys = [("k1".to_string(), b"0123456789abcdef".to_vec())].into();
        assert!(matches!(
            TokenSigner::new("k9", keys),
            Err(SignerError::MissingCurrentKey(_))
        ));
    }

    #[test]
    fn malformed_tokens_are_refused_without_panicking() {
        let signer = signer("k1", &[("k1", "0123456789abcdef")]);
        for bad in [
            "",
            ".",
            "v1",
            "v1.k1",
            "v1.k1.x",
            "v1.k1.x.y",
            "v3.k1.x.y",
            "v2.k1.x.y.z",
            &"a".repeat(300),
        ] {
            assert!(signer.verify(bad, 0).is_err(), "{bad:?} was accepted");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_verifies_and_never_panics(s in "\\PC{0,300}") {
            let signer = signer("k1", &[("k1", "0123456789abcdef")]);
            prop_assert!(signer.verify(&s, 0).is_err());
        }
    }
}
