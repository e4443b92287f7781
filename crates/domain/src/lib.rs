//! The seckill domain: the types and rules every service shares, with no I/O.
//!
//! - [`ids`]: `ProductId`, `UserId` and `OrderToken`, each parsed once at the edge.
//! - [`payment`]: the payment provider's callback signature.
//! - [`purchase_token`]: the signed one-time purchase token (issue and verify).
//! - [`flow`]: the flow record the Lua pre-deduct writes for every unit it reserves.
//! - [`lifecycle`]: where an order is after the purchase (`OrderStatus`), and why an
//!   unpaid one gives its units back (`Closing`).
//! - [`message`]: `OrderPlaced`, the body of the order message (versioned JSON).
//! - [`outcome`]: how a purchase ends (`PurchaseOutcome`), and what the pre-deduct script
//!   can answer on the way.
//! - [`reconcile`]: how one product's Redis flows and MySQL rows are told apart.

pub mod flow;
pub mod ids;
pub mod lifecycle;
pub mod message;
pub mod outcome;
pub mod payment;
pub mod purchase_token;
pub mod reconcile;

pub use flow::{FlowRecord, FlowState};
pub use ids::{IdError, OrderToken, ProductId, UserId};
pub use lifecycle::{Closing, OrderStatus, UnknownStatus};
pub use message::{DecodeError, MAX_ORDERS_PER_MESSAGE, OrderPlaced};
pub use outcome::{Cause, PreDeductOutcome, PurchaseOutcome, Refusal, TokenRefusal, Unsettled};
pub use payment::WebhookKey;
pub use purchase_token::{PurchaseClaims, TokenError, TokenSigner};
