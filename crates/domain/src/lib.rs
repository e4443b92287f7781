//! The seckill domain: the types and rules every service shares, with no I/O.
//!
//! - [`ids`]: `ProductId`, `UserId` and `OrderToken`, each parsed once at the edge.
//! - [`purchase_token`]: the signed one-time purchase token (issue and verify).
//! - [`flow`]: the flow record the Lua pre-deduct writes for every unit it reserves.
//! - [`message`]: `OrderPlaced`, the body of the order message (versioned JSON).
//! - [`outcome`]: what the pre-deduct script can answer.
//! - [`reconcile`]: how one product's Redis flows and MySQL rows are told apart.

pub mod flow;
pub mod ids;
pub mod message;
pub mod outcome;
pub mod purchase_token;
pub mod reconcile;

pub use flow::{FlowRecord, FlowState};
pub use ids::{IdError, OrderToken, ProductId, UserId};
pub use message::{DecodeError, MAX_ORDERS_PER_MESSAGE, OrderPlaced};
pub use outcome::PreDeductOutcome;
pub use purchase_token::{PurchaseClaims, TokenError, TokenSigner};
