//! What the purchase path records: each purchase's outcome, counted once where it ends
//! (`seckill_purchases_total`, `seckill_purchases_unheard_total` and their log lines), and
//! the spans and timings of its calls to Redis and the broker.

use std::time::Instant;

use domain::{OrderToken, PurchaseOutcome, Refusal, TokenRefusal, Unsettled};

use crate::error::ApiError;

/// The `outcome` label of `seckill_purchases_total`. Its discriminant is the index of its
/// counter in `PURCHASES`, so counting an outcome is an array index, not a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OutcomeLabel {
    Accepted,
    SoldOut,
    Duplicate,
    LimitExceeded,
    SaleNotOpen,
    InvalidToken,
    BadRequest,
    NotLoaded,
    Unanswered,
    NotReplicated,
    Unconfirmed,
    RolledBack,
    SendFailed,
}

impl OutcomeLabel {
    /// Every label, in discriminant order.
    const ALL: [Self; 13] = [
        Self::Accepted,
        Self::SoldOut,
        Self::Duplicate,
        Self::LimitExceeded,
        Self::SaleNotOpen,
        Self::InvalidToken,
        Self::BadRequest,
        Self::NotLoaded,
        Self::Unanswered,
        Self::NotReplicated,
        Self::Unconfirmed,
        Self::RolledBack,
        Self::SendFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::SoldOut => "sold_out",
            Self::Duplicate => "duplicate",
            Self::LimitExceeded => "limit_exceeded",
            Self::SaleNotOpen => "sale_not_open",
            Self::InvalidToken => "invalid_token",
            Self::BadRequest => "bad_request",
            Self::NotLoaded => "not_loaded",
            Self::Unanswered => "unanswered",
            Self::NotReplicated => "not_replicated",
            Self::Unconfirmed => "unconfirmed",
            Self::RolledBack => "rolled_back",
            Self::SendFailed => "send_failed",
        }
    }
}

thread_local! {
    /// One handle per label, registered once per worker thread rather than looked up in
    /// the recorder per purchase: after sell-out every request of the crowd is counted
    /// here. (The recorder is installed before the server starts: a handle taken earlier
    /// would count nowhere.)
    static PURCHASES: [metrics::Counter; OutcomeLabel::ALL.len()] = OutcomeLabel::ALL
        .map(|label| metrics::counter!("seckill_purchases_total", "outcome" => label.as_str()));
}

/// The `seckill_purchases_total` label of an outcome. Refusals for want of a rate or a
/// place are counted by `seckill_rate_limited_total` instead; a request asking for no
/// unit, a token for another buyer
/// or product, and a pre-deduct that never reached Redis were never counted here, and are
/// not, so the series keeps meaning what the dashboard and alerts read.
pub fn label(outcome: &PurchaseOutcome) -> Option<OutcomeLabel> {
    Some(match outcome {
        PurchaseOutcome::Queued { .. } => OutcomeLabel::Accepted,
        PurchaseOutcome::Refused(refusal) => match refusal {
            Refusal::SoldOut => OutcomeLabel::SoldOut,
            Refusal::Duplicate => OutcomeLabel::Duplicate,
            Refusal::LimitExceeded => OutcomeLabel::LimitExceeded,
            Refusal::SaleNotOpen => OutcomeLabel::SaleNotOpen,
            Refusal::QuantityAboveLimit => OutcomeLabel::BadRequest,
            Refusal::Token(TokenRefusal::Expired | TokenRefusal::NotValid) => {
                OutcomeLabel::InvalidToken
            }
            Refusal::Token(TokenRefusal::ForAnotherBuyer | TokenRefusal::ForAnotherProduct)
            | Refusal::RateLimited { .. }
            | Refusal::QuantityZero => return None,
        },
        PurchaseOutcome::Unsettled { why, .. } => match why {
            Unsettled::NotLoaded => OutcomeLabel::NotLoaded,
            Unsettled::PreDeductUnanswered => OutcomeLabel::Unanswered,
            Unsettled::NotReplicated => OutcomeLabel::NotReplicated,
            Unsettled::Unconfirmed => OutcomeLabel::Unconfirmed,
            Unsettled::RolledBack => OutcomeLabel::RolledBack,
            Unsettled::BrokerUnreachable => OutcomeLabel::SendFailed,
            Unsettled::StoreUnreachable | Unsettled::Unanswered => return None,
        },
    })
}

/// Counts a purchase that has ended; once per purchase, whether or not its buyer is still
/// there to hear it.
pub fn ended(outcome: &PurchaseOutcome) {
    if let Some(label) = label(outcome) {
        PURCHASES.with(|counters| counters[label as usize].increment(1));
    }
}

/// Counts a purchase refused before it was handed to a task of its own, and gives it back.
pub fn answered(outcome: PurchaseOutcome) -> PurchaseOutcome {
    ended(&outcome);
    outcome
}

/// A purchase that got past the cheap filters has ended: counted, and a queued one logged.
pub fn settled(outcome: &PurchaseOutcome, order: &OrderToken, quantity: u32) {
    ended(outcome);
    if outcome.is_queued() {
        tracing::info!(order = %order.short(), quantity, "Purchase queued.");
    }
}

/// The buyer hung up before the purchase was answered: counted and logged, with the cause
/// of a 503 that no answer will log now.
pub fn unheard(outcome: PurchaseOutcome, order: &OrderToken) {
    let order = order.short();
    if outcome.is_queued() {
        metrics::counter!("seckill_purchases_unheard_total", "outcome" => "accepted").increment(1);
        tracing::info!(%order, "The buyer hung up before the purchase was answered; it was accepted.");
        return;
    }
    metrics::counter!("seckill_purchases_unheard_total", "outcome" => "refused").increment(1);
    if let Ok(refusal) = ApiError::try_from(outcome) {
        refusal.log_cause();
        tracing::info!(%order, code = refusal.code(), reason = %refusal, "The buyer hung up before the purchase was answered; it was refused.");
    }
}

pub fn lua_seconds(script: &'static str, started: Instant) {
    metrics::histogram!("seckill_lua_seconds", "script" => script)
        .record(started.elapsed().as_secs_f64());
}

/// A span for one Lua script call (`lua.<script>`), a Redis client call in the trace; none
/// while spans are not exported. Nothing is logged inside one, and `seckill_lua_seconds`
/// times every call: without an exporter the span would be work no one sees, on every
/// purchase the crowd makes.
pub fn lua_span(script: &'static str) -> tracing::Span {
    if !platform::telemetry::exporting() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        "lua",
        otel.name = %format_args!("lua.{script}"),
        otel.kind = "client",
        db.system.name = "redis",
        script,
    )
}

/// The `mq.send_half` span of one order's transactional send; none while spans are not
/// exported, like [`lua_span`]: `seckill_send_seconds` times every send.
pub fn send_span(token: &OrderToken) -> tracing::Span {
    if !platform::telemetry::exporting() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        "mq.send_half",
        otel.kind = "producer",
        messaging.system = "rocketmq",
        order = %token.short(),
        decision = tracing::field::Empty,
    )
}

/// The `purchase` span. Not for a purchase refused from the sold-out flag while spans are
/// not exported: that refusal logs nothing and sends nothing, and the span would be most
/// of its cost.
pub fn purchase_span(
    product: domain::ProductId,
    buyer: domain::UserId,
    flagged: bool,
) -> tracing::Span {
    if flagged && !platform::telemetry::exporting() {
        return tracing::Span::none();
    }
    tracing::info_span!("purchase", product_id = %product, user_id = %buyer)
}

pub fn answer(decision: order_queue::TxDecision) -> &'static str {
    match decision {
        order_queue::TxDecision::Commit => "commit",
        order_queue::TxDecision::Rollback => "rollback",
        order_queue::TxDecision::Unknown => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_an_outcome_counts_under_is_registered() {
        let outcomes = [
            PurchaseOutcome::Queued {
                order_token: OrderToken::new(domain::ProductId(1), 1),
            },
            PurchaseOutcome::Refused(Refusal::SoldOut),
            PurchaseOutcome::Refused(Refusal::Duplicate),
            PurchaseOutcome::Refused(Refusal::LimitExceeded),
            PurchaseOutcome::Refused(Refusal::SaleNotOpen),
            PurchaseOutcome::Refused(Refusal::QuantityAboveLimit),
            PurchaseOutcome::Refused(Refusal::Token(TokenRefusal::Expired)),
            PurchaseOutcome::unsettled(Unsettled::NotLoaded),
            PurchaseOutcome::unsettled(Unsettled::PreDeductUnanswered),
            PurchaseOutcome::unsettled(Unsettled::NotReplicated),
            PurchaseOutcome::unsettled(Unsettled::Unconfirmed),
            PurchaseOutcome::unsettled(Unsettled::RolledBack),
            PurchaseOutcome::unsettled(Unsettled::BrokerUnreachable),
        ];
        let labels: std::collections::BTreeSet<_> = outcomes.iter().filter_map(label).collect();
        assert_eq!(labels, OutcomeLabel::ALL.into_iter().collect());
    }

    #[test]
    fn each_label_sits_at_its_own_discriminant_with_a_name_of_its_own() {
        for (at, label) in OutcomeLabel::ALL.into_iter().enumerate() {
            assert_eq!(label as usize, at, "{label:?}");
        }
        let names: std::collections::BTreeSet<_> = OutcomeLabel::ALL
            .map(OutcomeLabel::as_str)
            .into_iter()
            .collect();
        assert_eq!(names.len(), OutcomeLabel::ALL.len());
    }

    #[test]
    fn rate_limits_are_counted_by_their_own_series_not_as_purchases() {
        let limited = PurchaseOutcome::Refused(Refusal::RateLimited {
            retry_after_secs: 1,
        });
        assert_eq!(label(&limited), None);
    }
}
