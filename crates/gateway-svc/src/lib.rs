//! gateway-svc: where the crowd arrives. It issues signed purchase tokens, rate-limits,
//! runs the Redis pre-deduct, and for each winner sends the transactional order message.
//!
//! - [`startup`]: `Application::build(settings)` and `run_until_stopped`.
//! - [`routes`]: the HTTP handlers of API.md; [`error`]: their error codes; [`openapi`]:
//!   the OpenAPI document generated from both, served at `/api-docs/openapi.json`.
//! - [`purchase`]: the purchase path and the transaction listener (confirm.lua).
//! - [`identity`], [`rate_limit`], [`sold_out`]: the cheap filters in front of Redis.

pub mod error;
pub mod identity;
pub mod openapi;
pub mod purchase;
pub mod rate_limit;
pub mod routes;
pub mod sold_out;
pub mod startup;

pub use startup::Application;
