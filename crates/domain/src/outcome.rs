//! What a purchase comes to, in the sale's words, and what `lua/pre_deduct.lua` answers
//! on its way there.
//!
//! A purchase ends in one of three ways ([`PurchaseOutcome`]): the order is queued, the
//! purchase is refused for a reason the buyer can act on ([`Refusal`]), or the buyer can be
//! told neither yes nor no ([`Unsettled`]): a store or the broker did not answer, or the
//! answer it gave leaves the order open. The gateway turns these into HTTP; nothing here
//! knows about it.
//!
//! The pre-deduct script returns `{code, stock_after}`; the codes are fixed here
//! ([`PreDeductOutcome`]) and in the script's header, nowhere else.

/// How a purchase ended.
#[derive(Debug)]
pub enum PurchaseOutcome {
    /// The order is queued: its message is committed, or its flow is committed and its
    /// order on the way. It will be written, or the unit goes back on sale.
    Queued { order_token: crate::OrderToken },
    /// Refused; nothing is reserved for the purchase.
    Refused(Refusal),
    /// Neither yes nor no can be said; nothing is reserved for the purchase any more, or it
    /// is being given back. `cause` is the failure behind it, for the operator's log.
    Unsettled {
        why: Unsettled,
        cause: Option<Cause>,
    },
}

/// The failure behind an [`PurchaseOutcome::Unsettled`] purchase, as its dependency
/// reported it.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

impl PurchaseOutcome {
    /// Unsettled for `why`, with no failure to show for it.
    pub fn unsettled(why: Unsettled) -> Self {
        Self::Unsettled { why, cause: None }
    }

    /// Unsettled for `why`, because of `cause`.
    pub fn unsettled_by(why: Unsettled, cause: impl Into<Cause>) -> Self {
        Self::Unsettled {
            why,
            cause: Some(cause.into()),
        }
    }

    pub fn is_queued(&self) -> bool {
        matches!(self, Self::Queued { .. })
    }
}

impl From<Refusal> for PurchaseOutcome {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}

/// Why a purchase was refused. Each is final for the request as it stands: only the
/// request or the sale's state changing could turn it into an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Too many requests (the instance's or the buyer's rate), or too many purchases under
    /// way at once; the same token buys once the wait is over.
    RateLimited {
        retry_after_secs: u64,
    },
    /// No unit asked for.
    QuantityZero,
    /// More units asked for than the per-user limit: nothing was written.
    QuantityAboveLimit,
    /// The purchase token does not let this buyer buy this product now.
    Token(TokenRefusal),
    /// Outside the product's sale window, or the token is of an earlier sale.
    SaleNotOpen,
    /// The token has been used already.
    Duplicate,
    /// The buyer already holds the per-user limit.
    LimitExceeded,
    SoldOut,
}

impl From<TokenRefusal> for Refusal {
    fn from(refusal: TokenRefusal) -> Self {
        Self::Token(refusal)
    }
}

/// What is wrong with a purchase token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRefusal {
    Expired,
    /// Malformed, signed with an unknown key, or with a signature that does not match.
    NotValid,
    ForAnotherBuyer,
    ForAnotherProduct,
}

impl From<crate::TokenError> for TokenRefusal {
    fn from(error: crate::TokenError) -> Self {
        match error {
            crate::TokenError::Expired => Self::Expired,
            crate::TokenError::Malformed
            | crate::TokenError::UnknownKey
            | crate::TokenError::BadSignature => Self::NotValid,
        }
    }
}

/// Why a purchase can be told neither yes nor no.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsettled {
    /// Redis refused the pre-deduct's connection or call: nothing ran.
    StoreUnreachable,
    /// Redis has no meta for the product: it was never loaded, or Redis lost it.
    NotLoaded,
    /// Redis did not answer the pre-deduct, which may have run (or may still): the token
    /// was given back.
    PreDeductUnanswered,
    /// The pre-deduct reserved, but too few replicas acknowledged it in time: a failover
    /// could have sold the unit again, so it was given back.
    NotReplicated,
    /// The local transaction gave no answer and the flow is not committed.
    Unconfirmed,
    /// The broker was told ROLLBACK and discards the half message.
    RolledBack,
    /// The order message could not be sent: the broker cannot be reached.
    BrokerUnreachable,
    /// The purchase ended without an answer (its task panicked or was stopped); the
    /// order's status tells whether it was placed.
    Unanswered,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreDeductOutcome {
    /// The unit is reserved and its flow written; `stock_after` is what is left.
    Reserved { stock_after: i64 },
    /// This order token has been used (or tombstoned) already.
    Duplicate,
    /// The buyer would hold more than the per-user limit.
    LimitExceeded,
    /// Not enough stock left; `stock_left` may still serve a smaller quantity.
    SoldOut { stock_left: i64 },
    /// The product's meta is missing: Redis was never loaded or lost its data.
    NotLoaded,
    /// Outside the product's sale window.
    SaleNotOpen,
    /// The quantity asked for is outside 1..=per-user limit: bad input, nothing was written.
    QuantityAboveLimit,
}

impl PreDeductOutcome {
    pub fn from_script(code: i64, stock_after: i64) -> Option<Self> {
        Some(match code {
            1 => Self::Reserved { stock_after },
            -1 => Self::Duplicate,
            -2 => Self::LimitExceeded,
            -3 => Self::SoldOut {
                stock_left: stock_after,
            },
            -4 => Self::NotLoaded,
            -5 => Self::SaleNotOpen,
            -6 => Self::QuantityAboveLimit,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_token_error_is_one_refusal_the_buyer_can_read() {
        use crate::TokenError;
        assert_eq!(
            TokenRefusal::from(TokenError::Expired),
            TokenRefusal::Expired
        );
        for error in [
            TokenError::Malformed,
            TokenError::UnknownKey,
            TokenError::BadSignature,
        ] {
            assert_eq!(TokenRefusal::from(error), TokenRefusal::NotValid);
        }
    }

    #[test]
    fn an_unsettled_purchase_keeps_the_failure_behind_it() {
        let outcome = PurchaseOutcome::unsettled_by(
            Unsettled::BrokerUnreachable,
            std::io::Error::other("connection refused"),
        );
        match outcome {
            PurchaseOutcome::Unsettled {
                why: Unsettled::BrokerUnreachable,
                cause: Some(cause),
            } => assert_eq!(cause.to_string(), "connection refused"),
            other => panic!("{other:?}"),
        }
        assert!(!PurchaseOutcome::unsettled(Unsettled::NotLoaded).is_queued());
        assert!(
            PurchaseOutcome::Queued {
                order_token: crate::OrderToken::new(crate::ProductId(1), 1)
            }
            .is_queued()
        );
    }

    #[test]
    fn every_script_code_has_one_meaning() {
        assert_eq!(
            PreDeductOutcome::from_script(1, 4),
            Some(PreDeductOutcome::Reserved { stock_after: 4 })
        );
        assert_eq!(
            PreDeductOutcome::from_script(-3, 0),
            Some(PreDeductOutcome::SoldOut { stock_left: 0 })
        );
        assert_eq!(PreDeductOutcome::from_script(0, 0), None);
    }
}
