//! The local transaction and the broker's check-back: both are `confirm.lua`.

use std::time::Instant;

use domain::{OrderPlaced, OrderToken};
use order_queue::{LocalTransaction, TxDecision};
use platform::telemetry::{ORDER_TOKEN_ATTRIBUTE, annotate};
use stock_cache::StockCache;
use tokio::runtime::Handle;
use tracing::Instrument;

use super::record::{answer, lua_seconds, lua_span};

/// The local transaction and the check-back: both are `confirm.lua`. The client calls
/// them on its own blocking threads, so they drive Redis on a runtime of their own.
pub struct ConfirmInRedis {
    pub cache: StockCache,
    pub runtime: Handle,
}

impl ConfirmInRedis {
    /// confirm.lua for the orders of one message, inside `span` (entered on this thread, so
    /// log lines carry its trace id).
    fn confirm(
        &self,
        tokens: &[OrderToken],
        span: tracing::Span,
        kind: &'static str,
    ) -> TxDecision {
        let decision = span.in_scope(|| {
            let started = Instant::now();
            let confirmed = self
                .runtime
                .block_on(self.cache.confirm_all(tokens).instrument(lua_span("confirm")));
            lua_seconds("confirm", started);
            match confirmed {
                Ok(true) => TxDecision::Commit,
                Ok(false) => TxDecision::Rollback,
                Err(error) => {
                    tracing::warn!(order = %tokens[0].short(), orders = tokens.len(), error = ?error, "confirm.lua failed; the broker will check back.");
                    TxDecision::Unknown
                }
            }
        });
        span.record("answer", answer(decision));
        metrics::counter!("seckill_checkbacks_total", "kind" => kind, "answer" => answer(decision))
            .increment(1);
        decision
    }
}

impl LocalTransaction for ConfirmInRedis {
    fn execute(&self, orders: &[OrderPlaced], sent_under: &tracing::Span) -> TxDecision {
        // Crash point 2: the half message is stored and the flows reserved, but no answer
        // will come from here; the broker's check-back, served by any gateway of the
        // producer group, commits them from the flow records.
        platform::crash_point!("gateway::in_local_transaction");
        // Fault drills: the local transaction gives no answer, as when confirm.lua times out.
        #[cfg(feature = "failpoints")]
        platform::faults::fail::fail_point!("gateway::local_transaction_unanswered", |_| {
            TxDecision::Unknown
        });
        let tokens: Vec<OrderToken> = orders.iter().map(|o| o.order_token.clone()).collect();
        // Under the first order's send; the other purchases' traces show their own sends.
        let span = tracing::info_span!(
            parent: sent_under.id(),
            "local_transaction",
            order = %tokens[0].short(),
            orders = tokens.len(),
            answer = tracing::field::Empty,
        );
        self.confirm(&tokens, span, "local")
    }

    fn check(&self, order_tokens: &[OrderToken]) -> TxDecision {
        // Fault drills: the check-back is answered "unknown" while armed, as if it came later
        // than the drill's steps (the broker asks seconds to minutes after the send).
        #[cfg(feature = "failpoints")]
        platform::faults::fail::fail_point!("gateway::check_back_unanswered", |_| {
            TxDecision::Unknown
        });
        // The broker asks about a half message, maybe long after the purchase and on another
        // gateway: a trace of its own, which names the (first) order token for the operator.
        let span = tracing::info_span!(
            parent: None,
            "check_back",
            order = %order_tokens[0].short(),
            orders = order_tokens.len(),
            answer = tracing::field::Empty,
        );
        annotate(&span, ORDER_TOKEN_ATTRIBUTE, order_tokens[0].to_string());
        self.confirm(order_tokens, span, "check_back")
    }
}
