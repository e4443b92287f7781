//! The fault drills of the issue, one module per fault: the three services as processes on
//! the drills' own stack, a crowd, the fault, a restart, and the audit of every promise once
//! the system has settled. Drills run one at a time (see the crate docs: a machine-wide
//! lock), whatever libtest's thread count.

mod broker_acl;
mod broker_crash;
mod broker_rollback;
mod buyer_hangs_up;
mod consumer_crash;
mod deadlines_through_broker_crash;
mod expiry_crash;
mod gateway_crash;
mod graceful_stop;
mod helpers;
mod mysql_outage;
mod payment_or_deadline;
mod redis_cluster;
mod redis_loss;
mod redis_loss_awaiting_payment;
mod redis_stall;
mod restock;
mod sentinel_failover;
mod unanswered_then_redis_loss;
