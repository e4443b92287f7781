//! Fault drills: the three services as real processes on a stack of their own, a crowd of
//! buyers, a fault at a chosen moment (a process or server killed, stopped, crashed at a fail
//! point), and then the question every drill asks — once the system has settled, did it keep
//! its promises? The drills are in `tests/drills/`; this library is their harness.
//!
//! # Running them
//!
//! The drills run the debug binaries next to the test binary, and those must be built with
//! the services' fail points (their `failpoints` features):
//!
//! ```sh
//! export CARGO_TARGET_DIR=$HOME/.cache/seckill/target
//! cargo build --workspace --bins --features "order-consumer-svc/failpoints gateway-svc/failpoints"
//! cargo test -p fault-drills
//! ```
//!
//! `cargo test -p fault-drills` builds no service binary, so it cannot undo the features;
//! `cargo test --workspace` does build them, so `make test` gives it the same features
//! (`TEST_FEATURES`) as the build before it. Any other build of the binaries without the
//! features (another `cargo build` in a shared target folder) removes the points again: a
//! drill that arms one then fails at once, saying so (see [`ARMED`]).
//!
//! The drills start their own stack (see [`stack`]) in `.run/drills` (or
//! `SECKILL_DRILLS_RUN_DIR`) on ports 26379, 23306, 29876 and 30911 (+30909, 30912); it is
//! left running afterwards like the default one, and `stack::up_command()` is the line that
//! starts it by hand (`up` → `status`, `down`, `kill broker`, …).
//!
//! # One drill at a time
//!
//! Drills kill and stop the servers they share, so they must never overlap. [`Drill::begin`]
//! takes an exclusive lock on a file in the temp folder named after the drills' broker port,
//! held until the [`Drill`] is dropped. That serialises drills however they are started:
//! several `#[tokio::test]`s of one binary on libtest's threads, several drill binaries,
//! two people's `cargo test` on one machine. No `--test-threads=1` is needed, and the other
//! suites, on the default stack, keep running in parallel.
//!
//! # Writing a drill
//!
//! ```no_run
//! use std::time::Duration;
//! use fault_drills::{CrowdPlan, Drill, Service, Settle, settle_and_audit, stack::Component};
//!
//! # async fn drill() {
//! let mut drill = Drill::begin("broker_kill").await; // lock, stack up, own db/prefix/topic
//! drill.start(Service::Gateway).await;               // real binaries, env from the drill
//! drill.start(Service::Consumer).await;
//! let sale = drill.open_sale(60).await;              // MySQL + Redis, like an admin PUT
//! let crowd = drill.crowd(&sale, CrowdPlan::steady(300, 20.0));
//! crowd.until_accepted(10, Duration::from_secs(20)).await;
//! drill.kill_component(Component::Broker).await;     // the fault
//! drill.start_component(Component::Broker).await;
//! let outcome = crowd.finish().await;                // who was answered 202, and with what
//! let audit = settle_and_audit(&drill, &sale, &outcome, Settle::within(Duration::from_secs(60))).await;
//! # let _ = audit;
//! # }
//! ```
//!
//! - [`Drill`]: the drill's isolated piece of the stack (`drill.stack`: a
//!   [`test_support::stack::TestStack`] — database, key prefix, topic and groups of its
//!   own) and its service processes: `start`, `start_with` extra variables such as
//!   `FAILPOINTS`, `spawn_with` (no wait for readiness), `kill`, `terminate` (SIGTERM and a
//!   deadline), `until_exit` (a crash point); a restarted service keeps its port. The stack
//!   components: `kill_component`, `stop_component`, `start_component`, `wipe_component`;
//!   whatever is still down when the drill ends is started again. And `metric` (a
//!   Prometheus series, summed), `cpu_seconds` (from `/proc`), `count` (an SQL count on the
//!   drill's database), `until_mysql_idle`, `reconcile_once`, `set_env` (settings for every
//!   service started afterwards), `log_paths`.
//! - [`crowd`]: buyers against the gateway ([`CrowdPlan::steady`] for a stream a fault can
//!   land in, [`CrowdPlan::rush`] for a burst); [`CrowdOutcome`] keeps every answer with its
//!   time, above all the order tokens of the 202s.
//! - [`audit`]: [`settle_and_audit`] polls MySQL and Redis until every promise holds, then
//!   requires `reconcile-svc --once` to find the sale clean; [`Settle`] says how long, and
//!   whether periodic reconcile runs may help (for damage only reconcile repairs).
//!   [`audit::audit_once`] is one reading, for a drill's own checks between steps.
//! - [`stack`]: the drills' stack through `deploy/local/stack.sh` (ports, run folder,
//!   `kill` / `stop` / `start` / `restart` / `wipe` of a [`stack::Component`]).
//! - [`metrics`]: a counter out of Prometheus text; a process's CPU time.
//! - [`eventually`]: poll a condition with a deadline — drills wait for events, never for
//!   a fixed time where something can be polled.
//!
//! Fail points: a service compiled with its `failpoints` feature arms the points named in
//! the `FAILPOINTS` variable at start-up (the `fail` crate's syntax, `platform::faults`);
//! pass it with `drill.start_with(service, &[("FAILPOINTS", "consumer::after_commit=1*return")])`.
//! At a crash point (`platform::crash_point!`) `return` crashes the process (SIGABRT); at
//! the gateway's two answer points, `gateway::local_transaction_unanswered` and
//! `gateway::check_back_unanswered`, it makes the local transaction or the check-back answer
//! "unknown" as if Redis had not answered; `sleep(ms)` holds any point. The points are
//! listed in order-consumer-svc's crate docs and in the gateway's `purchase` module, plus
//! `lifecycle::after_close` in order-lifecycle (an order ended in MySQL, Redis not yet
//! told), armed in whichever service ends orders: the consumer's expirer or the gateway.
//!
//! # Adding a drill
//!
//! A module in `tests/drills/` (declared in `main.rs`), one `#[tokio::test(flavor =
//! "multi_thread")]` per scenario named as a sentence, each starting with
//! [`Drill::begin`] and ending with [`settle_and_audit`] plus the drill's own assertions
//! about the fault (it happened where intended, the sale felt it). Timings shared by
//! drills are in `tests/drills/helpers.rs`.

pub mod audit;
pub mod crowd;
pub mod drill;
pub mod metrics;
pub mod stack;

pub use audit::{Audit, Settle, settle_and_audit};
pub use crowd::{Crowd, CrowdOutcome, CrowdPlan};
pub use drill::{ARMED, Drill, PRODUCT, ReconcileRun, Sale, Service, Stopped};
pub use test_support::eventually;
