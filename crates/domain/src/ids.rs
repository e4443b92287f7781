//! Identifiers, parsed once at the edge so that the rest of the code cannot hold a bad one.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("`{0}` is not an unsigned 64-bit id")]
    NotU64(String),
    #[error("`{0}` is not an order token")]
    NotOrderToken(String),
}

macro_rules! u64_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl $name {
            pub fn get(self) -> u64 {
                self.0
            }
        }

        impl FromStr for $name {
            type Err = IdError;

            /// Only plain decimal digits: no sign, no spaces, no leading `+`.
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(IdError::NotU64(s.to_owned()));
                }
                s.parse().map(Self).map_err(|_| IdError::NotU64(s.to_owned()))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

u64_id!(
    /// A product on sale.
    ProductId
);
u64_id!(
    /// A buyer, as the identity provider names them.
    UserId
);

/// The unique id of one purchase attempt: one purchase token → at most one order.
///
/// It names its product (`<product>-<32 hex>`) so that an order can be found from its
/// token alone — every Redis key of a product shares one hash slot, and the status
/// endpoint has nothing else to go by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OrderToken {
    product_id: ProductId,
    nonce: u128,
}

impl OrderToken {
    pub fn new(product_id: ProductId, nonce: u128) -> Self {
        Self { product_id, nonce }
    }

    /// A fresh token with 128 random bits: unguessable and, in practice, unique.
    pub fn random(product_id: ProductId) -> Self {
        Self::new(product_id, rand::random())
    }

    pub fn product_id(&self) -> ProductId {
        self.product_id
    }

    pub fn nonce(&self) -> u128 {
        self.nonce
    }

    /// The form log lines and span fields carry: `<product>-<first 8 hex>…`. Enough to tell
    /// orders apart in an incident and to find the full token in MySQL; not enough to use
    /// it, which a full token in a log line would be.
    pub fn short(&self) -> String {
        format!("{}-{:08x}…", self.product_id, self.nonce >> 96)
    }
}

impl fmt::Display for OrderToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{:032x}", self.product_id, self.nonce)
    }
}

impl FromStr for OrderToken {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || IdError::NotOrderToken(s.chars().take(80).collect());
        let (product, nonce) = s.split_once('-').ok_or_else(bad)?;
        let is_lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        if nonce.len() != 32 || !nonce.bytes().all(is_lower_hex) {
            return Err(bad());
        }
        let product_id = product.parse().map_err(|_| bad())?;
        let nonce = u128::from_str_radix(nonce, 16).map_err(|_| bad())?;
        Ok(Self::new(product_id, nonce))
    }
}

impl Serialize for OrderToken {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for OrderToken {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_accept_only_plain_decimal_u64() {
        assert_eq!("42".parse::<ProductId>(), Ok(ProductId(42)));
        assert_eq!(
            "18446744073709551615".parse::<UserId>(),
            Ok(UserId(u64::MAX))
        );
        for bad in ["", "-1", "+1", " 1", "1.0", "18446744073709551616", "abc"] {
            assert!(bad.parse::<ProductId>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn an_order_token_names_its_product() {
        let token = OrderToken::new(ProductId(7), 0xabc);
        assert_eq!(token.to_string(), "7-00000000000000000000000000000abc");
        assert_eq!(token.to_string().parse::<OrderToken>(), Ok(token.clone()));
        assert_eq!(token.product_id(), ProductId(7));
    }

    #[test]
    fn a_short_token_keeps_the_product_and_eight_hex_digits() {
        let token = OrderToken::new(ProductId(42), 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert_eq!(token.short(), "42-01234567…");
        assert_eq!(OrderToken::new(ProductId(7), 0xabc).short(), "7-00000000…");
    }

    #[test]
    fn malformed_order_tokens_are_refused() {
        for bad in [
            "",
            "7",
            "7-",
            "x-00000000000000000000000000000abc",
            "7-00000000000000000000000000000ABC",
            "7-0000000000000000000000000000abc",
            "7-00000000000000000000000000000abcd",
        ] {
            assert!(bad.parse::<OrderToken>().is_err(), "{bad:?} was accepted");
        }
    }

    proptest! {
        #[test]
        fn order_tokens_round_trip_through_text(product: u64, nonce: u128) {
            let token = OrderToken::new(ProductId(product), nonce);
            prop_assert_eq!(token.to_string().parse::<OrderToken>(), Ok(token));
        }

        #[test]
        fn a_short_token_is_the_head_of_the_full_one(product: u64, nonce: u128) {
            let token = OrderToken::new(ProductId(product), nonce);
            let short = token.short();
            let head = short.strip_suffix('…').unwrap();
            prop_assert_eq!(head.len(), product.to_string().len() + 9);
            prop_assert!(token.to_string().starts_with(head));
        }

        #[test]
        fn parsing_arbitrary_text_never_panics(s in "\\PC*") {
            let _ = s.parse::<OrderToken>();
            let _ = s.parse::<ProductId>();
        }
    }
}
