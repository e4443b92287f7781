//! The gateway's public contract (docs/api.md), driven over HTTP against the real Redis,
//! MariaDB and RocketMQ broker. Each test runs its own gateway on its own database, key
//! prefix and topic.

mod admin;
mod bad_input;
mod connections;
mod helpers;
mod identity;
mod lifecycle;
mod observability;
mod openapi;
mod ops_port;
mod purchase;
mod reload;
mod replicas;
mod tls;
