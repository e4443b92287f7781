//! The purchase-token verifier, as the gateway calls it on every purchase request.
//!
//! Each input is tried three ways: as a whole token (what a buyer sends), as the text of a
//! payload that the harness base64-encodes and signs (so the payload parser, which sits
//! behind the signature check, is reached too), and as a raw payload segment that the
//! harness signs without encoding it (the base64 decoder behind the signature).
//! Seeds in `fuzz/corpus/purchase_token/` are signed with `KEY` below.

#![no_main]

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use domain::{TokenError, TokenSigner};
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use sha2::Sha256;

const KEY_ID: &str = "k1";
const KEY: &[u8] = b"fuzz-key-0123456789";
/// 2023-11-14: the seeds expire in 2027, so they verify.
const NOW_MS: i64 = 1_700_000_000_000;

fn signer() -> TokenSigner {
    TokenSigner::new(
        KEY_ID,
        HashMap::from([
            (KEY_ID.to_string(), KEY.to_vec()),
            ("k2".to_string(), b"fuzz-key-rotated-out".to_vec()),
        ]),
    )
    .expect("a valid key set")
}

fn sign(payload_segment: &str) -> String {
    let signed = format!("v2.{KEY_ID}.{payload_segment}");
    let mut mac = Hmac::<Sha256>::new_from_slice(KEY).expect("any key length");
    mac.update(signed.as_bytes());
    format!(
        "{signed}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

/// Whatever verifies must be live, and must be what our signer issues for those claims.
fn check(signer: &TokenSigner, token: &str) {
    match signer.verify(token, NOW_MS) {
        Ok(claims) => {
            assert!(
                NOW_MS < claims.expires_at_ms,
                "{token}: expired but accepted"
            );
            let reissued = signer.issue(&claims);
            assert_eq!(signer.verify(&reissued, NOW_MS), Ok(claims), "{token}");
        }
        Err(TokenError::Malformed | TokenError::UnknownKey) => {}
        Err(TokenError::BadSignature | TokenError::Expired) => {
            // Refused after the structure was understood: the key id must be one we hold.
            let key_id = token.split('.').nth(1);
            assert!(matches!(key_id, Some("k1" | "k2")), "{token}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let signer = signer();
    check(&signer, &text);
    check(&signer, &sign(&URL_SAFE_NO_PAD.encode(text.as_bytes())));
    check(&signer, &sign(&text));
});
