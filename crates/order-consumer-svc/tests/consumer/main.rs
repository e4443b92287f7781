//! order-consumer-svc against the real MariaDB, Redis and RocketMQ broker: the batch writer on
//! its own (`writer`), the whole service fed through the broker (`through_broker`), which of
//! its replicas expires orders (`expiry`), and its start and stop (`lifecycle`). Each test
//! has its own database, key prefix and topic, so they run in parallel.

mod expiry;
mod helpers;
mod lifecycle;
mod through_broker;
mod writer;
