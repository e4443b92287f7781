//! gateway-svc: where the crowd arrives. It issues signed purchase tokens, rate-limits,
//! runs the Redis pre-deduct, and for each winner sends the transactional order message.
//!
//! - [`startup`]: `Application::build(settings)` and `run_until_stopped`; [`settings`]: the
//!   gateway's own sections and the shared ones it reads.
//! - [`routes`]: the HTTP handlers of docs/api.md, which parse the request and shape the
//!   answer; [`error`]: their error codes; [`responses`]: those errors as the OpenAPI
//!   document names them; [`openapi`]: the parts of the document no handler states, served
//!   at `/api-docs/openapi.json` by `routes::docs`.
//! - [`purchase`]: the purchase from the first check to the send, ending in a
//!   `domain::PurchaseOutcome`, and the transaction listener (confirm.lua).
//! - [`identity`], [`rate_limit`], [`sold_out`]: the cheap filters in front of Redis;
//!   [`sale_windows`]: the windows tokens are issued by, read from Redis once a moment.

pub mod error;
pub mod identity;
pub mod openapi;
pub mod purchase;
pub mod rate_limit;
pub mod responses;
pub mod routes;
pub mod sale_windows;
pub mod settings;
pub mod sold_out;
pub mod startup;
pub mod watch;

pub use settings::Settings;
pub use startup::Application;
