//! The purchase's decision table: what each answer on the way means for the buyer. Pure
//! functions of the answers, so that every row is tested here without HTTP, Redis or the
//! broker; [`super`] asks the questions and [`super::settle`] acts on the answers.

use domain::{
    PreDeductOutcome, ProductId, PurchaseClaims, Refusal, TokenRefusal, Unsettled, UserId,
};
use order_queue::{BatchedSend, TxDecision};

/// Whether a verified token lets this buyer buy this product.
pub fn token_fits(
    claims: &PurchaseClaims,
    buyer: UserId,
    product: ProductId,
) -> Result<(), TokenRefusal> {
    if claims.user_id != buyer {
        return Err(TokenRefusal::ForAnotherBuyer);
    }
    if claims.product_id() != product {
        return Err(TokenRefusal::ForAnotherProduct);
    }
    Ok(())
}

/// The stock a pre-deduct's answer shows, if it shows any, and whether that leaves the
/// product sold out here (no unit left).
pub fn stock_seen(answer: PreDeductOutcome) -> Option<(i64, bool)> {
    match answer {
        PreDeductOutcome::Reserved { stock_after: left }
        | PreDeductOutcome::SoldOut { stock_left: left } => Some((left, left == 0)),
        _ => None,
    }
}

/// What a pre-deduct Redis answered means: the unit is reserved (go on to the send), or
/// the purchase ends here.
pub enum Reserved {
    Won,
    Refused(Refusal),
    Unsettled(Unsettled),
}

pub fn reserved(answer: PreDeductOutcome) -> Reserved {
    match answer {
        PreDeductOutcome::Reserved { .. } => Reserved::Won,
        PreDeductOutcome::SoldOut { .. } => Reserved::Refused(Refusal::SoldOut),
        PreDeductOutcome::Duplicate => Reserved::Refused(Refusal::Duplicate),
        PreDeductOutcome::LimitExceeded => Reserved::Refused(Refusal::LimitExceeded),
        PreDeductOutcome::SaleNotOpen => Reserved::Refused(Refusal::SaleNotOpen),
        PreDeductOutcome::QuantityAboveLimit => Reserved::Refused(Refusal::QuantityAboveLimit),
        PreDeductOutcome::NotLoaded => Reserved::Unsettled(Unsettled::NotLoaded),
    }
}

/// A pre-deduct Redis did not answer, or whose reservation the replicas did not
/// acknowledge: it may hold a unit the purchase cannot keep, so the token is given back
/// (with this reason) before the purchase is answered; `None`: it ran nowhere, nothing to
/// give back.
pub fn pre_deduct_failed(may_have_run: bool, unreplicated: bool) -> Option<Withdraw> {
    if unreplicated {
        Some(Withdraw {
            reason: "not_replicated",
            why: Unsettled::NotReplicated,
        })
    } else if may_have_run {
        Some(Withdraw {
            reason: "pre_deduct_unanswered",
            why: Unsettled::PreDeductUnanswered,
        })
    } else {
        None
    }
}

/// A token to give back before the purchase is answered: the reason `release.lua` records,
/// and what the buyer is told once it is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Withdraw {
    pub reason: &'static str,
    pub why: Unsettled,
}

/// What the transactional send's answer asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterSend {
    /// The broker committed the message: queued.
    Queued,
    /// The local transaction gave no answer: ask Redis again before answering.
    Confirm,
    /// Rolled back, or not sent: the token goes back first.
    Withdraw(Withdraw),
}

pub fn after_send(sent: &BatchedSend) -> AfterSend {
    match sent {
        Ok(TxDecision::Commit) => AfterSend::Queued,
        Ok(TxDecision::Unknown) => AfterSend::Confirm,
        Ok(TxDecision::Rollback) => AfterSend::Withdraw(Withdraw {
            reason: "rolled_back",
            why: Unsettled::RolledBack,
        }),
        Err(_) => AfterSend::Withdraw(Withdraw {
            reason: "send_failed",
            why: Unsettled::BrokerUnreachable,
        }),
    }
}

/// What confirm.lua, asked again after an unanswered local transaction, means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterConfirm {
    /// The flow is committed: the order is owed, and sent plainly.
    Committed,
    /// No flow to commit (tombstoned, or the product lost): the check-back rolls back.
    Unconfirmed,
    /// Redis did not answer: ask again, or give the token back.
    AskAgain,
}

pub fn after_confirm(confirmed: Result<bool, &stock_cache::CacheError>) -> AfterConfirm {
    match confirmed {
        Ok(true) => AfterConfirm::Committed,
        Ok(false) | Err(stock_cache::CacheError::NotLoaded) => AfterConfirm::Unconfirmed,
        Err(_) => AfterConfirm::AskAgain,
    }
}

/// What giving a refused purchase's token back came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawal {
    /// Nothing is reserved for the token and it is tombstoned: no path can make it an order.
    Withdrawn,
    /// Its flow is committed: an order is owed, and the purchase is answered queued.
    Committed,
    /// Redis answered none of the releases; a background task goes on asking.
    Pending,
}

/// A withdrawal that found the flow committed owes the buyer the order (`None`); any other
/// ends the purchase unsettled for `why`.
pub fn after_withdrawal(withdrawal: Withdrawal, why: Unsettled) -> Option<Unsettled> {
    match withdrawal {
        Withdrawal::Committed => None,
        Withdrawal::Withdrawn | Withdrawal::Pending => Some(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::OrderToken;

    fn claims(user: u64, product: u64) -> PurchaseClaims {
        PurchaseClaims {
            order_token: OrderToken::new(ProductId(product), 7),
            user_id: UserId(user),
            expires_at_ms: 0,
            sale: 1,
        }
    }

    #[test]
    fn a_token_buys_only_for_its_own_buyer_and_product() {
        assert_eq!(token_fits(&claims(1, 2), UserId(1), ProductId(2)), Ok(()));
        assert_eq!(
            token_fits(&claims(1, 2), UserId(9), ProductId(2)),
            Err(TokenRefusal::ForAnotherBuyer)
        );
        assert_eq!(
            token_fits(&claims(1, 2), UserId(1), ProductId(9)),
            Err(TokenRefusal::ForAnotherProduct)
        );
    }

    #[test]
    fn every_pre_deduct_answer_but_a_reservation_ends_the_purchase() {
        use PreDeductOutcome as P;
        assert!(matches!(
            reserved(P::Reserved { stock_after: 3 }),
            Reserved::Won
        ));
        for (answer, refusal) in [
            (P::SoldOut { stock_left: 0 }, Refusal::SoldOut),
            (P::Duplicate, Refusal::Duplicate),
            (P::LimitExceeded, Refusal::LimitExceeded),
            (P::SaleNotOpen, Refusal::SaleNotOpen),
            (P::QuantityAboveLimit, Refusal::QuantityAboveLimit),
        ] {
            assert!(matches!(reserved(answer), Reserved::Refused(r) if r == refusal));
        }
        assert!(matches!(
            reserved(P::NotLoaded),
            Reserved::Unsettled(Unsettled::NotLoaded)
        ));
    }

    #[test]
    fn the_last_unit_reserved_or_none_left_flags_the_product_sold_out() {
        use PreDeductOutcome as P;
        assert_eq!(stock_seen(P::Reserved { stock_after: 0 }), Some((0, true)));
        assert_eq!(stock_seen(P::Reserved { stock_after: 2 }), Some((2, false)));
        assert_eq!(stock_seen(P::SoldOut { stock_left: 0 }), Some((0, true)));
        assert_eq!(stock_seen(P::SoldOut { stock_left: 1 }), Some((1, false)));
        assert_eq!(stock_seen(P::Duplicate), None);
    }

    #[test]
    fn a_pre_deduct_that_may_hold_a_unit_is_given_back_first() {
        assert_eq!(
            pre_deduct_failed(false, true).map(|w| w.why),
            Some(Unsettled::NotReplicated)
        );
        assert_eq!(
            pre_deduct_failed(true, false).map(|w| w.why),
            Some(Unsettled::PreDeductUnanswered)
        );
        assert_eq!(pre_deduct_failed(false, false), None);
    }

    #[test]
    fn only_a_commit_queues_the_order_at_once() {
        assert_eq!(after_send(&Ok(TxDecision::Commit)), AfterSend::Queued);
        assert_eq!(after_send(&Ok(TxDecision::Unknown)), AfterSend::Confirm);
        assert!(matches!(
            after_send(&Ok(TxDecision::Rollback)),
            AfterSend::Withdraw(Withdraw {
                why: Unsettled::RolledBack,
                ..
            })
        ));
    }

    #[test]
    fn an_unanswered_local_transaction_is_queued_only_once_its_flow_is_committed() {
        assert_eq!(after_confirm(Ok(true)), AfterConfirm::Committed);
        assert_eq!(after_confirm(Ok(false)), AfterConfirm::Unconfirmed);
        assert_eq!(
            after_confirm(Err(&stock_cache::CacheError::NotLoaded)),
            AfterConfirm::Unconfirmed
        );
        assert_eq!(
            after_confirm(Err(&stock_cache::CacheError::Timeout(
                std::time::Duration::from_secs(1)
            ))),
            AfterConfirm::AskAgain
        );
    }

    #[test]
    fn a_withdrawal_that_finds_the_flow_committed_owes_the_order() {
        assert_eq!(
            after_withdrawal(Withdrawal::Committed, Unsettled::RolledBack),
            None
        );
        for withdrawal in [Withdrawal::Withdrawn, Withdrawal::Pending] {
            assert_eq!(
                after_withdrawal(withdrawal, Unsettled::BrokerUnreachable),
                Some(Unsettled::BrokerUnreachable)
            );
        }
    }
}
