//! Faults and bad input: what reaches the domain from outside (purchase tokens from buyers,
//! order message bodies from the broker, flow records from Redis) is checked against
//! generated input. The same parsers are fuzzed for longer by the targets in `fuzz/`
//! (`deploy/test/fuzz.sh`); these properties run with every `cargo test`.
//!
//! `PROPTEST_CASES` raises the case count of every property here for a longer run.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use domain::message::ORDER_PLACED_VERSION;
use domain::{
    DecodeError, FlowRecord, FlowState, OrderPlaced, OrderToken, ProductId, PurchaseClaims,
    TokenError, TokenSigner, UserId,
};
use hmac::{Hmac, Mac};
use proptest::prelude::*;
use sha2::Sha256;

const KEY_1: &[u8] = b"0123456789abcdef";
const KEY_2: &[u8] = b"another-key-of-16";

/// Knows `k1` and `k2`, signs with `k1`: a mutated key id can name a key that exists.
fn signer() -> TokenSigner {
    TokenSigner::new(
        "k1",
        HashMap::from([("k1".into(), KEY_1.to_vec()), ("k2".into(), KEY_2.to_vec())]),
    )
    .unwrap()
}

fn signer_with(key_id: &str, key: &[u8]) -> TokenSigner {
    TokenSigner::new(key_id, HashMap::from([(key_id.to_string(), key.to_vec())])).unwrap()
}

/// Signs `v2.<key id>.<payload>` as the signer would, whatever the payload says.
fn sign_raw(key_id: &str, key: &[u8], payload: &str) -> String {
    let signed = format!("v2.{key_id}.{payload}");
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(signed.as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{signed}.{signature}")
}

fn claims_strategy() -> impl Strategy<Value = PurchaseClaims> {
    (
        any::<u64>(),
        any::<u128>(),
        any::<u64>(),
        any::<i64>(),
        any::<u64>(),
    )
        .prop_map(
            |(product, nonce, user, expires_at_ms, sale)| PurchaseClaims {
                order_token: OrderToken::new(ProductId(product), nonce),
                user_id: UserId(user),
                expires_at_ms,
                sale,
            },
        )
}

/// Claims that are still valid at `now`, with that `now`.
fn live_claims_strategy() -> impl Strategy<Value = (PurchaseClaims, i64)> {
    claims_strategy()
        .prop_filter("nothing is before i64::MIN", |c| c.expires_at_ms > i64::MIN)
        .prop_flat_map(|claims| {
            let expires = claims.expires_at_ms;
            (Just(claims), i64::MIN..expires)
        })
}

fn key_id_strategy() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,16}"
}

fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 16..64)
}

/// Text shaped like a token (`v2.<id>.<b64>.<b64>`), so that the verifier gets past its
/// first checks instead of refusing at the first dot.
fn token_shaped_strategy() -> impl Strategy<Value = String> {
    "(v1|v2|V1|)\\.(k1|k2|k3|[A-Za-z0-9_-]{0,17})\\.[A-Za-z0-9_=+/-]{0,140}\\.[A-Za-z0-9_=+/-]{0,60}"
}

fn order_strategy() -> impl Strategy<Value = OrderPlaced> {
    (
        any::<u64>(),
        any::<u128>(),
        any::<u64>(),
        1..=u32::MAX,
        any::<i64>(),
    )
        .prop_map(|(product, nonce, user, quantity, reserved_at_ms)| {
            OrderPlaced::new(
                OrderToken::new(ProductId(product), nonce),
                UserId(user),
                quantity,
                reserved_at_ms,
            )
        })
}

/// What a field of an order body could wrongly hold; `ABSENT` leaves the field out.
const ABSENT: &str = "<absent>";
const ODD_JSON_VALUES: &[&str] = &[
    ABSENT,
    "null",
    "true",
    "[]",
    "{}",
    "-1",
    "0",
    "2",
    "1.0",
    "1e3",
    "4294967296",
    "18446744073709551616",
    "-9223372036854775809",
    "\"1\"",
    "\"\"",
    "\"7-00000000000000000000000000000abc\"",
    "\"007-00000000000000000000000000000abc\"",
    "\"7-00000000000000000000000000000ABC\"",
];

/// A valid order's body with some of its fields left out or replaced by odd values, and
/// maybe an unknown or a repeated field.
fn order_body_with_odd_fields() -> impl Strategy<Value = String> {
    (
        order_strategy(),
        proptest::collection::vec(
            proptest::option::weighted(0.25, proptest::sample::select(ODD_JSON_VALUES)),
            6,
        ),
        proptest::sample::select(&["", ",\"extra\":1", ",\"v\":1", ",\"quantity\":0"][..]),
    )
        .prop_map(|(order, odd, extra)| {
            let fields = [
                ("v", order.v.to_string()),
                ("order_token", format!("\"{}\"", order.order_token)),
                ("user_id", order.user_id.to_string()),
                ("product_id", order.product_id.to_string()),
                ("quantity", order.quantity.to_string()),
                ("reserved_at_ms", order.reserved_at_ms.to_string()),
            ];
            let fields: Vec<String> = fields
                .iter()
                .zip(odd)
                .filter_map(|((name, value), odd)| match odd {
                    Some(odd) if odd == ABSENT => None,
                    Some(odd) => Some(format!("\"{name}\":{odd}")),
                    None => Some(format!("\"{name}\":{value}")),
                })
                .collect();
            format!("{{{}{extra}}}", fields.join(","))
        })
}

fn flow_strategy() -> impl Strategy<Value = FlowRecord> {
    (
        any::<u64>(),
        any::<u32>(),
        any::<i64>(),
        any::<i64>(),
        any::<i64>(),
        prop_oneof![Just(FlowState::Reserved), Just(FlowState::Committed)],
    )
        .prop_map(
            |(user, quantity, stock_before, stock_after, reserved_at_ms, state)| FlowRecord {
                user_id: UserId(user),
                quantity,
                stock_before,
                stock_after,
                reserved_at_ms,
                state,
            },
        )
}

/// `token` with the byte at `index` replaced by another ASCII byte (`shift` in 1..128 picks
/// which): every other character a JSON request could carry in that place.
fn with_byte_changed(token: &str, index: usize, shift: u8) -> String {
    let mut bytes = token.as_bytes().to_vec();
    bytes[index] = (bytes[index] + shift) % 128;
    String::from_utf8(bytes).expect("a token is ASCII")
}

// ---------------------------------------------------------------------------------------
// Purchase tokens
// ---------------------------------------------------------------------------------------

proptest! {
    #[test]
    fn any_text_is_refused_by_the_token_verifier_without_panicking(
        token in "\\PC{0,300}",
        now in any::<i64>(),
    ) {
        prop_assert!(signer().verify(&token, now).is_err());
    }

    #[test]
    fn any_bytes_read_as_text_are_refused_by_the_token_verifier(
        bytes in proptest::collection::vec(any::<u8>(), 0..320),
        now in any::<i64>(),
    ) {
        let token = String::from_utf8_lossy(&bytes);
        prop_assert!(signer().verify(&token, now).is_err());
    }

    #[test]
    fn token_shaped_text_without_our_signature_is_refused(
        token in token_shaped_strategy(),
        now in any::<i64>(),
    ) {
        prop_assert!(signer().verify(&token, now).is_err());
    }

    #[test]
    fn a_signed_payload_of_any_text_is_refused_or_read_without_panicking(
        payload_text in "\\PC{0,120}|[0-9]{1,21}-[0-9a-f]{32}:[0-9]{1,21}:[+-]?[0-9]{1,20}(:[+-]?[0-9]{1,21})?(:[0-9])?",
        now in prop_oneof![Just(i64::MIN), any::<i64>()],
    ) {
        // The signature holds, so this reaches the payload parser: only our own signer
        // could write such a token, but the parser must not trust it to be well formed.
        let token = sign_raw("k1", KEY_1, &URL_SAFE_NO_PAD.encode(&payload_text));
        if let Ok(claims) = signer().verify(&token, now) {
            prop_assert!(now < claims.expires_at_ms);
            // What it read is what our signer would have written for those claims.
            prop_assert_eq!(signer().verify(&signer().issue(&claims), now), Ok(claims));
        }
    }

    #[test]
    fn an_issued_token_verifies_to_its_claims_under_any_key(
        key_id in key_id_strategy(),
        key in key_strategy(),
        (claims, now) in live_claims_strategy(),
    ) {
        let signer = signer_with(&key_id, &key);
        let token = signer.issue(&claims);
        // Even the longest ids and claims fit under the verifier's length limit.
        prop_assert!(token.len() <= 256, "{} bytes: {}", token.len(), token);
        prop_assert_eq!(signer.verify(&token, now), Ok(claims));
    }

    #[test]
    fn a_token_verifies_before_its_expiry_and_is_expired_from_then_on(
        claims in claims_strategy(),
        around_expiry in prop_oneof![Just(-1i64), Just(0), Just(1)],
        anytime in any::<i64>(),
        near in any::<bool>(),
    ) {
        let now = if near { claims.expires_at_ms.saturating_add(around_expiry) } else { anytime };
        let token = signer().issue(&claims);
        let verdict = signer().verify(&token, now);
        if now < claims.expires_at_ms {
            prop_assert_eq!(verdict, Ok(claims));
        } else {
            prop_assert_eq!(verdict, Err(TokenError::Expired));
        }
    }

    #[test]
    fn a_token_with_any_byte_changed_is_rejected(
        (claims, now) in live_claims_strategy(),
        position in any::<proptest::sample::Index>(),
        shift in 1u8..128,
    ) {
        let token = signer().issue(&claims);
        let changed = with_byte_changed(&token, position.index(token.len()), shift);
        prop_assert!(signer().verify(&changed, now).is_err(), "{changed} was accepted");
    }

    #[test]
    fn a_token_cut_short_or_lengthened_is_rejected(
        (claims, now) in live_claims_strategy(),
        cut in any::<proptest::sample::Index>(),
        tail in "[A-Za-z0-9_.=-]{1,8}",
    ) {
        let token = signer().issue(&claims);
        let short = &token[..cut.index(token.len())];
        prop_assert!(signer().verify(short, now).is_err(), "{short} was accepted");
        let long = format!("{token}{tail}");
        prop_assert!(signer().verify(&long, now).is_err(), "{long} was accepted");
    }

    #[test]
    fn a_token_signed_under_an_unknown_key_id_is_rejected(
        key_id in key_id_strategy().prop_filter("not ours", |id| id != "k1" && id != "k2"),
        (claims, now) in live_claims_strategy(),
    ) {
        // Same key material, another id: the id alone decides which key verifies.
        let token = signer_with(&key_id, KEY_1).issue(&claims);
        prop_assert_eq!(signer().verify(&token, now), Err(TokenError::UnknownKey));
    }

    #[test]
    fn a_token_signed_with_other_key_material_is_rejected(
        key in key_strategy().prop_filter("not our key", |key| key != KEY_1),
        (claims, now) in live_claims_strategy(),
    ) {
        let token = signer_with("k1", &key).issue(&claims);
        prop_assert_eq!(signer().verify(&token, now), Err(TokenError::BadSignature));
    }

    #[test]
    fn a_token_relabelled_with_our_other_key_id_is_rejected(
        (claims, now) in live_claims_strategy(),
    ) {
        let token = signer().issue(&claims);
        let relabelled = token.replacen("v2.k1.", "v2.k2.", 1);
        prop_assert_eq!(signer().verify(&relabelled, now), Err(TokenError::BadSignature));
    }

    #[test]
    fn a_token_names_only_the_buyer_and_product_it_was_issued_for(
        (claims, now) in live_claims_strategy(),
        other_user in any::<u64>(),
        other_product in any::<u64>(),
    ) {
        let token = signer().issue(&claims);
        let verified = signer().verify(&token, now).unwrap();
        // The gateway compares these with the caller and the URL's product.
        prop_assert_eq!(verified.user_id, claims.user_id);
        prop_assert_eq!(verified.product_id(), claims.product_id());

        // Moving the signature onto a payload for another buyer or product breaks it.
        let signature = token.rsplit_once('.').unwrap().1;
        let retarget = |user: UserId, product: ProductId| {
            let payload = format!(
                "{}:{}:{}:{}",
                OrderToken::new(product, claims.order_token.nonce()),
                user,
                claims.expires_at_ms,
                claims.sale
            );
            format!("v2.k1.{}.{signature}", URL_SAFE_NO_PAD.encode(payload))
        };
        if other_user != claims.user_id.get() {
            let token = retarget(UserId(other_user), claims.product_id());
            prop_assert_eq!(signer().verify(&token, now), Err(TokenError::BadSignature));
        }
        if other_product != claims.product_id().get() {
            let token = retarget(claims.user_id, ProductId(other_product));
            prop_assert_eq!(signer().verify(&token, now), Err(TokenError::BadSignature));
        }
    }
}

#[test]
fn every_single_byte_change_of_a_token_is_rejected() {
    // Exhaustive for one token: every position, every other ASCII byte (the key id `k1`
    // can become `k2`, a key the signer holds).
    let claims = PurchaseClaims {
        order_token: OrderToken::new(ProductId(3), 0x0123_4567_89ab_cdef),
        user_id: UserId(12),
        expires_at_ms: 1_700_000_000_000,
        sale: 1_764_000_000_000,
    };
    let token = signer().issue(&claims);
    assert_eq!(signer().verify(&token, 0), Ok(claims));
    for index in 0..token.len() {
        for shift in 1..128 {
            let changed = with_byte_changed(&token, index, shift);
            assert!(
                signer().verify(&changed, 0).is_err(),
                "{changed} was accepted"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Order tokens (message keys, the status endpoint's path)
// ---------------------------------------------------------------------------------------

proptest! {
    #[test]
    fn any_text_either_fails_to_parse_as_an_order_token_or_prints_back_as_one(
        text in "\\PC{0,80}|[0-9]{1,24}-[0-9a-fA-F]{30,34}",
    ) {
        if let Ok(token) = text.parse::<OrderToken>() {
            // Leading zeros in the product are read (`007-…` is product 7); what is
            // printed is the canonical form, which reads back to the same token.
            let printed = token.to_string();
            prop_assert_eq!(printed.parse::<OrderToken>(), Ok(token.clone()));
            prop_assert_eq!(token.product_id().to_string().len() + 33, printed.len());
        }
    }
}

// ---------------------------------------------------------------------------------------
// Order messages (the body the consumer decodes with `OrderPlaced::decode_all`)
// ---------------------------------------------------------------------------------------

proptest! {
    #[test]
    fn any_bytes_are_decoded_or_refused_without_panicking(
        body in proptest::collection::vec(any::<u8>(), 0..1100),
    ) {
        if let Ok(order) = OrderPlaced::decode(&body) {
            prop_assert_eq!(order.v, ORDER_PLACED_VERSION);
            prop_assert_eq!(order.order_token.product_id(), order.product_id);
            prop_assert!(order.quantity > 0);
        }
        if let Ok(orders) = OrderPlaced::decode_all(&body) {
            prop_assert!(orders.iter().all(|o| o.order_token.product_id() == o.product_id));
        }
    }

    #[test]
    fn an_order_body_with_fields_missing_mistyped_or_out_of_range_is_refused_or_consistent(
        body in order_body_with_odd_fields(),
    ) {
        if let Ok(order) = OrderPlaced::decode(body.as_bytes()) {
            prop_assert_eq!(order.order_token.product_id(), order.product_id);
            prop_assert!(order.quantity > 0);
            prop_assert_eq!(OrderPlaced::decode(&order.encode()).unwrap(), order);
        }
    }

    #[test]
    fn an_encoded_order_decodes_to_itself(order in order_strategy()) {
        prop_assert_eq!(OrderPlaced::decode(&order.encode()).unwrap(), order);
    }

    #[test]
    fn a_message_of_several_orders_with_any_byte_changed_is_refused_whole_or_still_consistent(
        orders in proptest::collection::vec(order_strategy(), 1..8),
        position in any::<proptest::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut body = OrderPlaced::encode_all(&orders);
        prop_assert_eq!(OrderPlaced::decode_all(&body).unwrap(), orders);
        let index = position.index(body.len());
        body[index] = byte;
        if let Ok(decoded) = OrderPlaced::decode_all(&body) {
            prop_assert!(!decoded.is_empty());
            for order in decoded {
                prop_assert_eq!(order.order_token.product_id(), order.product_id);
                prop_assert!(order.quantity > 0);
            }
        }
    }

    #[test]
    fn an_order_with_any_byte_of_its_body_changed_is_refused_or_still_consistent(
        order in order_strategy(),
        position in any::<proptest::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut body = order.encode();
        let index = position.index(body.len());
        body[index] = byte;
        // A changed digit can still make a valid order; it must never make an
        // inconsistent one.
        if let Ok(decoded) = OrderPlaced::decode(&body) {
            prop_assert_eq!(decoded.order_token.product_id(), decoded.product_id);
            prop_assert!(decoded.quantity > 0);
        }
    }

    #[test]
    fn an_order_of_another_version_or_of_no_units_or_for_another_product_is_refused(
        order in order_strategy(),
        version in any::<u32>().prop_filter("not ours", |v| *v != ORDER_PLACED_VERSION),
        other_product in any::<u64>(),
    ) {
        let mut message = order.clone();
        message.v = version;
        prop_assert!(matches!(
            OrderPlaced::decode(&message.encode()),
            Err(DecodeError::UnknownVersion(v)) if v == version
        ));

        let mut message = order.clone();
        message.quantity = 0;
        prop_assert!(matches!(
            OrderPlaced::decode(&message.encode()),
            Err(DecodeError::ZeroQuantity)
        ));

        let mut message = order;
        message.product_id = ProductId(other_product);
        let decoded = OrderPlaced::decode(&message.encode());
        if other_product == message.order_token.product_id().get() {
            prop_assert_eq!(decoded.unwrap(), message);
        } else {
            let is_mismatch = matches!(decoded, Err(DecodeError::ProductMismatch { .. }));
            prop_assert!(is_mismatch);
        }
    }
}

#[test]
fn a_body_over_the_size_limit_is_refused_before_it_is_parsed() {
    let padded = format!("{}{}", " ".repeat(1024), "{}");
    assert!(matches!(
        OrderPlaced::decode(padded.as_bytes()),
        Err(DecodeError::TooLarge(1026))
    ));
}

#[test]
fn deeply_nested_json_is_refused_without_overflowing_the_stack() {
    for open in ["[", "{\"v\":"] {
        let body = open.repeat(1024 / open.len());
        assert!(OrderPlaced::decode(body.as_bytes()).is_err());
    }
}

// ---------------------------------------------------------------------------------------
// Flow records (the JSON the Lua scripts write into Redis)
// ---------------------------------------------------------------------------------------

proptest! {
    #[test]
    fn a_flow_record_reads_back_from_its_json(flow in flow_strategy()) {
        let json = serde_json::to_string(&flow).unwrap();
        prop_assert_eq!(FlowRecord::from_json(&json).unwrap(), flow);
    }

    #[test]
    fn any_text_is_read_as_a_flow_record_or_refused_without_panicking(
        json in "\\PC{0,200}",
    ) {
        let _ = FlowRecord::from_json(&json);
    }
}
