//! Crash points for the fault drills (`crates/fault-drills`), shared by the services.
//!
//! A service marks a place with [`crash_point!`]. Only when that service is built with its
//! own `failpoints` cargo feature (which turns on this crate's) does the point exist;
//! otherwise the macro expands to nothing, so release builds carry neither the points nor
//! the `fail` crate.
//!
//! A point is armed at start-up by the `FAILPOINTS` environment variable in the `fail`
//! crate's syntax, e.g. `FAILPOINTS=gateway::after_pre_deduct=1*return`: the first request
//! to reach it **aborts the process** (SIGABRT: no destructor runs, nothing is answered,
//! acknowledged or flushed — what a SIGKILL or the OOM killer leaves). The `return` action
//! is the crash; the crate's other actions (`sleep(ms)`, `pause`, `print`) work as it
//! documents.

#[cfg(feature = "failpoints")]
pub use fail;

/// `crash_point!("service::place")`: with the calling crate's `failpoints` feature, the
/// process aborts here when `FAILPOINTS` arms the point with `return`; otherwise nothing.
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        $crate::faults::fail::fail_point!($name, |_| $crate::faults::crash($name));
    };
}

/// Reads `FAILPOINTS` and arms the points it names, for as long as the returned scenario
/// lives. Panics on a malformed `FAILPOINTS`: a drill that armed nothing must not pass for
/// one that did.
#[cfg(feature = "failpoints")]
pub fn arm() -> fail::FailScenario<'static> {
    let scenario = fail::FailScenario::setup();
    let armed = fail::list();
    if !armed.is_empty() {
        tracing::warn!(
            fail_points = ?armed,
            "Fail points armed: this process may crash on purpose (fault drills only)."
        );
    }
    scenario
}

/// Ends the process at once, as a crash would.
#[cfg(feature = "failpoints")]
pub fn crash(name: &str) -> ! {
    // stderr is unbuffered: the line is in the log before the process is gone.
    eprintln!("fail point {name}: aborting the process");
    std::process::abort()
}
