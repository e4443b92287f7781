//! The gateway's public contract (API.md), driven over HTTP against the real Redis,
//! MariaDB and RocketMQ broker. Each test runs its own gateway on its own database, key
//! prefix and topic.

// Proving Send for the RocketMQ client's types (push consumer, producer) nests deeper
// than the default limit of 128 once the order batcher's task holds a publisher.
#![recursion_limit = "256"]

mod admin;
mod bad_input;
mod helpers;
mod identity;
mod observability;
mod openapi;
mod purchase;
mod reload;
