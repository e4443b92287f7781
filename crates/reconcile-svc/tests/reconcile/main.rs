//! Reconcile against the real Redis, MariaDB and broker: each test injects one kind of
//! inconsistency for real, runs the audit, checks the report and the repaired state, and
//! runs it again to see that nothing is repaired twice.

mod cli;
mod dead_letters;
mod helpers;
mod lease;
mod lifecycle;
mod operator;
mod oversold;
mod repairs;
